#include "model/vision_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "checkpoint/json_file.h"

namespace duet::model {

namespace {

using nlohmann::json;

bool has(const json& object, const char* key) { return object.contains(key) && !object[key].is_null(); }

// An integer in 1..max; `required` ones are refused by name when absent, the others keep `value`.
void read_size(const std::string& source, const json& object, const char* prefix, const char* key, bool required,
               int64_t& value, int64_t max = int64_t{1} << 20) {
  if (!has(object, key)) {
    if (required) fail("{}: missing {}{}", source, prefix, key);
    return;
  }
  const auto& v = object[key];
  if (!v.is_number_integer()) fail("{}: {}{} must be an integer, got {}", source, prefix, key, v.dump());
  value = v.get<int64_t>();
  if (value <= 0 || value > max) fail("{}: {}{} = {} is out of range (1..{})", source, prefix, key, value, max);
}

void read_id(const std::string& source, const json& root, const char* key, int64_t& value) {
  if (!has(root, key)) return;
  const auto& v = root[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    fail("{}: {} must be a non-negative integer, got {}", source, key, v.dump());
  value = v.get<int64_t>();
}

// The rotary base: vision_config.rope_theta, or rope_parameters.rope_theta (newer 5.x, rope_type "axial").
void read_rope(const std::string& source, const json& vision, VisionConfig& c) {
  if (has(vision, "rope_parameters")) {
    const auto& p = vision["rope_parameters"];
    if (!p.is_object()) fail("{}: vision_config.rope_parameters must be an object", source);
    if (has(p, "rope_type") && p["rope_type"] != "axial" && p["rope_type"] != "default")
      fail("{}: vision_config.rope_parameters.rope_type {} is not supported (only \"axial\")", source,
           p["rope_type"].dump());
    if (has(p, "rope_theta")) {
      if (!p["rope_theta"].is_number()) fail("{}: vision_config.rope_parameters.rope_theta must be a number", source);
      c.rope_theta = p["rope_theta"].get<double>();
    }
  }
  if (has(vision, "rope_theta")) {
    if (!vision["rope_theta"].is_number()) fail("{}: vision_config.rope_theta must be a number", source);
    c.rope_theta = vision["rope_theta"].get<double>();
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: vision_config.rope_theta = {} must be positive", source, c.rope_theta);
}

void check(const std::string& source, const json& root, const VisionConfig& c) {
  if (c.hidden_size % c.num_heads != 0)
    fail("{}: vision_config.hidden_size = {} is not a multiple of vision_config.num_heads = {}", source, c.hidden_size,
         c.num_heads);
  // The 2-D rotary splits head_dim / 2 into a row half and a column half of frequency pairs.
  if (c.head_dim() % 4 != 0)
    fail("{}: vision_config head_dim = hidden_size / num_heads = {} must be a multiple of 4 (2-D rotary)", source,
         c.head_dim());
  if (c.grid_side() * c.grid_side() != c.num_position_embeddings)
    fail("{}: vision_config.num_position_embeddings = {} is not a square", source, c.num_position_embeddings);
  if (c.hidden_act != "gelu_pytorch_tanh")
    fail("{}: vision_config.hidden_act \"{}\" is not supported (only \"gelu_pytorch_tanh\")", source, c.hidden_act);
  if (c.in_channels != 3)
    fail("{}: vision_config.in_channels = {} is not supported (only 3, RGB)", source, c.in_channels);
  if (has(root, "text_config") && root["text_config"].is_object() && has(root["text_config"], "hidden_size")) {
    const auto& h = root["text_config"]["hidden_size"];
    if (h.is_number_integer() && h.get<int64_t>() != c.out_hidden_size)
      fail("{}: vision_config.out_hidden_size = {} differs from text_config.hidden_size = {}", source,
           c.out_hidden_size, h.get<int64_t>());
  }
  const int64_t ids[] = {c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      if (ids[i] == ids[j])
        fail("{}: image_token_id, video_token_id, vision_start_token_id and vision_end_token_id must differ ({})",
             source, ids[i]);
}

}  // namespace

int64_t VisionConfig::grid_side() const {
  return static_cast<int64_t>(std::sqrt(static_cast<double>(num_position_embeddings)));
}

bool VisionConfig::present(const std::string& json_text) {
  const json root = json::parse(json_text, nullptr, false);
  return root.is_object() && root.contains("vision_config") && root["vision_config"].is_object();
}

VisionConfig VisionConfig::parse(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", source, e.what());
  }
  if (!root.is_object()) fail("{}: not a JSON object", source);
  if (!has(root, "vision_config")) fail("{}: missing vision_config (not a multimodal checkpoint)", source);
  const json& v = root["vision_config"];
  if (!v.is_object()) fail("{}: vision_config must be an object", source);

  VisionConfig c;
  const char* p = "vision_config.";
  read_size(source, v, p, "depth", true, c.depth, 1024);
  read_size(source, v, p, "hidden_size", true, c.hidden_size, int64_t{1} << 16);
  read_size(source, v, p, "num_heads", true, c.num_heads, 1024);
  read_size(source, v, p, "intermediate_size", true, c.intermediate_size, int64_t{1} << 18);
  read_size(source, v, p, "out_hidden_size", true, c.out_hidden_size, int64_t{1} << 16);
  read_size(source, v, p, "num_position_embeddings", true, c.num_position_embeddings, int64_t{1} << 20);
  read_size(source, v, p, "patch_size", false, c.patch_size, 1024);
  read_size(source, v, p, "temporal_patch_size", false, c.temporal_patch_size, 16);
  read_size(source, v, p, "spatial_merge_size", false, c.spatial_merge_size, 16);
  read_size(source, v, p, "in_channels", false, c.in_channels, 16);
  if (has(v, "hidden_act")) {
    if (!v["hidden_act"].is_string()) fail("{}: vision_config.hidden_act must be a string", source);
    c.hidden_act = v["hidden_act"].get<std::string>();
  }
  // Qwen3-VL's deepstack features: transformers' Qwen3.5 classes have none, so a non-empty list is not Qwen3.5's.
  if (has(v, "deepstack_visual_indexes")) {
    const auto& d = v["deepstack_visual_indexes"];
    if (!d.is_array() || !d.empty())
      fail("{}: vision_config.deepstack_visual_indexes = {} is not supported (Qwen3.5 has no deepstack; only [])",
           source, d.dump());
  }
  read_rope(source, v, c);
  read_id(source, root, "image_token_id", c.image_token_id);
  read_id(source, root, "video_token_id", c.video_token_id);
  read_id(source, root, "vision_start_token_id", c.vision_start_token_id);
  read_id(source, root, "vision_end_token_id", c.vision_end_token_id);
  check(source, root, c);
  return c;
}

VisionConfig VisionConfig::load(const std::string& config_path) {
  return parse(checkpoint::read_json_file(config_path).dump(), config_path);
}

}  // namespace duet::model
