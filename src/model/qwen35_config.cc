#include "model/qwen35_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "checkpoint/json_file.h"

namespace duet::model {

namespace {

using nlohmann::json;

// Reads fields of one JSON object, naming the file and the field path in every refusal.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }
  std::string path(const char* key) const { return prefix_ + key; }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("{}: missing {}", source_, path(key));
    }
    const auto& v = object_[key];
    if (!v.is_number_integer()) fail("{}: {} must be an integer, got {}", source_, path(key), v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& v = object_[key];
    if (!v.is_number()) fail("{}: {} must be a number, got {}", source_, path(key), v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = object_[key];
    if (!v.is_boolean()) fail("{}: {} must be true or false, got {}", source_, path(key), v.dump());
    return v.get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const auto& v = object_[key];
    if (!v.is_string()) fail("{}: {} must be a string, got {}", source_, path(key), v.dump());
    return v.get<std::string>();
  }
  const json& raw(const char* key) const { return object_[key]; }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;
};

std::vector<int64_t> token_ids(const std::string& source, const char* name, const json& value) {
  std::vector<int64_t> ids;
  if (value.is_null()) return ids;
  if (value.is_number_integer()) return {value.get<int64_t>()};
  if (!value.is_array()) fail("{}: {} must be an id or a list of ids", source, name);
  for (const auto& v : value) {
    if (!v.is_number_integer()) fail("{}: {} must be an id or a list of ids", source, name);
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

// Sizes are capped so that products of a few of them cannot overflow 64-bit offsets.
void check_size(const std::string& source, const char* name, int64_t value, int64_t max = int64_t{1} << 24) {
  if (value <= 0 || value > max) fail("{}: {} = {} is out of range (1..{})", source, name, value, max);
}

void read_rope(const std::string& source, const Fields& text, Qwen35Config& c) {
  // transformers 5 keeps RoPE settings in rope_parameters; older configs use rope_scaling and top-level fields.
  const json empty = json::object();
  const json& params = text.has("rope_parameters") ? text.raw("rope_parameters") : empty;
  const json& scaling = text.has("rope_scaling") ? text.raw("rope_scaling") : empty;
  if (!params.is_object()) fail("{}: rope_parameters must be an object", source);
  if (!scaling.is_object()) fail("{}: rope_scaling must be an object", source);
  const Fields p(params, source, "rope_parameters."), s(scaling, source, "rope_scaling.");

  // Any unsupported type named anywhere is refused, even if another place says "default".
  std::string type = "default";
  for (const Fields* f : {&s, &p})
    for (const char* key : {"type", "rope_type"}) {
      if (!f->has(key)) continue;
      const auto named = f->text(key, type);
      if (named != "default" && named != "mrope")
        fail("{}: rope type \"{}\" ({}) is not supported (only \"default\", and \"mrope\" which is 1-D RoPE for text)",
             source, named, f->path(key));
      if (type == "default") type = named;
    }
  c.rope_type = type;
  c.rope_theta = p.number("rope_theta", s.number("rope_theta", text.number("rope_theta", 10000.0)));
  c.partial_rotary_factor =
      p.number("partial_rotary_factor", s.number("partial_rotary_factor", text.number("partial_rotary_factor", 0.25)));
  for (const Fields* f : {&s, &p}) {
    if (f->has("mrope_section")) {
      c.mrope_section.clear();
      for (const auto& v : f->raw("mrope_section")) {
        if (!v.is_number_integer()) fail("{}: {} must be a list of integers", source, f->path("mrope_section"));
        c.mrope_section.push_back(v.get<int64_t>());
      }
    }
    c.mrope_interleaved = f->boolean("mrope_interleaved", c.mrope_interleaved);
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: rope_theta = {} must be positive", source, c.rope_theta);
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    fail("{}: partial_rotary_factor = {} must be in (0, 1]", source, c.partial_rotary_factor);
}

void check(const std::string& source, const Qwen35Config& c) {
  check_size(source, "vocab_size", c.vocab_size, int64_t{1} << 22);
  check_size(source, "hidden_size", c.hidden_size, int64_t{1} << 16);
  check_size(source, "intermediate_size", c.intermediate_size, int64_t{1} << 18);
  check_size(source, "num_hidden_layers", c.num_hidden_layers, 1024);
  check_size(source, "num_attention_heads", c.num_attention_heads, 1024);
  check_size(source, "num_key_value_heads", c.num_key_value_heads, 1024);
  check_size(source, "head_dim", c.head_dim, 4096);
  check_size(source, "linear_num_key_heads", c.linear_num_key_heads, 1024);
  check_size(source, "linear_num_value_heads", c.linear_num_value_heads, 1024);
  check_size(source, "linear_key_head_dim", c.linear_key_head_dim, 4096);
  check_size(source, "linear_value_head_dim", c.linear_value_head_dim, 4096);
  check_size(source, "linear_conv_kernel_dim", c.linear_conv_kernel_dim, 64);
  check_size(source, "max_position_embeddings", c.max_position_embeddings, int64_t{1} << 24);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads = {} is not a multiple of num_key_value_heads = {}", source, c.num_attention_heads,
         c.num_key_value_heads);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads = {} is not a multiple of linear_num_key_heads = {}", source,
         c.linear_num_value_heads, c.linear_num_key_heads);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    fail("{}: rms_norm_eps = {} must be positive", source, c.rms_norm_eps);
  const int64_t rotary = c.rotary_dim();
  if (rotary < 2 || rotary % 2 != 0 || rotary > c.head_dim)
    fail("{}: head_dim {} * partial_rotary_factor {} = {} rotary dims: must be even and in [2, head_dim]", source,
         c.head_dim, c.partial_rotary_factor, rotary);
  if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
    fail("{}: layer_types has {} entries, num_hidden_layers is {}", source, c.layer_types.size(), c.num_hidden_layers);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      fail("{}: eos_token_id {} is outside the vocabulary ({})", source, id, c.vocab_size);
}

}  // namespace

int64_t Qwen35Config::layer_count(LayerType type) const {
  int64_t count = 0;
  for (auto t : layer_types) count += t == type;
  return count;
}

std::string_view layer_type_name(LayerType type) {
  return type == LayerType::full_attention ? "full_attention" : "linear_attention";
}

Qwen35Config Qwen35Config::parse(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!root.is_object()) fail("{}: not a JSON object", source);
  const Fields top(root, source, "");
  Qwen35Config c;
  c.model_type = top.text("model_type", "");
  if (c.model_type == "qwen3_5") {
    if (!top.has("text_config") || !root["text_config"].is_object())
      fail("{}: model_type qwen3_5 needs a text_config object", source);
    c.nested = true;
  } else if (c.model_type != "qwen3_5_text") {
    fail("{}: model_type \"{}\" is not supported (expected qwen3_5 or qwen3_5_text)", source, c.model_type);
  }
  const json& text_json = c.nested ? root["text_config"] : root;
  const Fields text(text_json, source, c.nested ? "text_config." : "");
  if (c.nested) {
    const auto inner = text.text("model_type", "qwen3_5_text");
    if (inner != "qwen3_5_text") fail("{}: text_config.model_type \"{}\" is not qwen3_5_text", source, inner);
  }

  c.vocab_size = text.integer("vocab_size");
  c.hidden_size = text.integer("hidden_size");
  c.intermediate_size = text.integer("intermediate_size");
  c.num_hidden_layers = text.integer("num_hidden_layers");
  c.rms_norm_eps = text.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = text.integer("max_position_embeddings", 32768);
  // The multimodal wrapper carries its own tie flag, which is the one transformers acts on.
  c.tie_word_embeddings = text.boolean("tie_word_embeddings", false);
  if (c.nested) c.tie_word_embeddings = top.boolean("tie_word_embeddings", c.tie_word_embeddings);

  c.num_attention_heads = text.integer("num_attention_heads");
  c.num_key_value_heads = text.integer("num_key_value_heads");
  c.head_dim = text.integer("head_dim", 256);
  c.linear_num_key_heads = text.integer("linear_num_key_heads", 16);
  c.linear_num_value_heads = text.integer("linear_num_value_heads", 32);
  c.linear_key_head_dim = text.integer("linear_key_head_dim", 128);
  c.linear_value_head_dim = text.integer("linear_value_head_dim", 128);
  c.linear_conv_kernel_dim = text.integer("linear_conv_kernel_dim", 4);
  read_rope(source, text, c);
  c.mtp_num_hidden_layers = text.integer("mtp_num_hidden_layers", 0);
  if (c.mtp_num_hidden_layers < 0 || c.mtp_num_hidden_layers > 64)
    fail("{}: mtp_num_hidden_layers = {} is out of range (0..64)", source, c.mtp_num_hidden_layers);
  c.mtp_use_dedicated_embeddings = text.boolean("mtp_use_dedicated_embeddings", false);

  const auto act = text.text("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act \"{}\" is not supported (only silu)", source, act);
  if (text.boolean("attention_bias", false)) fail("{}: attention_bias true is not supported", source);

  if (text.has("layer_types")) {
    const auto& types = text_json["layer_types"];
    if (!types.is_array()) fail("{}: layer_types must be a list", source);
    for (size_t i = 0; i < types.size(); ++i) {
      const auto name = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
      if (name == "linear_attention") {
        c.layer_types.push_back(LayerType::linear_attention);
      } else if (name == "full_attention") {
        c.layer_types.push_back(LayerType::full_attention);
      } else {
        fail("{}: layer_types[{}] = \"{}\" is not linear_attention or full_attention", source, i, name);
      }
    }
  } else {
    // transformers' default: every full_attention_interval-th layer is full attention.
    const int64_t interval = text.integer("full_attention_interval", 4);
    if (interval <= 0) fail("{}: full_attention_interval = {} must be positive", source, interval);
    for (int64_t i = 0; i < std::max<int64_t>(c.num_hidden_layers, 0); ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerType::full_attention : LayerType::linear_attention);
  }

  if (c.nested) c.image_token_id = top.integer("image_token_id", 248056);
  c.has_vision_tower = c.nested && top.has("vision_config");
  for (const Fields* f : {&top, &text}) {
    if (f->has("eos_token_id")) c.eos_token_ids = token_ids(source, "eos_token_id", f->raw("eos_token_id"));
    c.bos_token_id = f->has("bos_token_id") ? f->integer("bos_token_id") : c.bos_token_id;
    c.pad_token_id = f->has("pad_token_id") ? f->integer("pad_token_id") : c.pad_token_id;
  }
  check(source, c);
  return c;
}

Qwen35Config Qwen35Config::load(const std::string& config_path) {
  return parse(checkpoint::read_json_file(config_path).dump(), config_path);
}

}  // namespace duet::model
