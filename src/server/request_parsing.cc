#include "server/request_parsing.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>
#include <span>

#include "base/exact_json.h"
#include "server/errors.h"

namespace duet::server {
namespace {

const char* type_name(const Json& value) {
  if (value.is_number_integer() || exact_integer_text(value)) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // null, boolean, string, array, object
}

[[noreturn]] void refuse_type(const std::string& name, const Json& value, const char* expected) {
  refuse_field(name, fmt::format("expected {}, got {}", expected, type_name(value)));
}

const Json* field(const Json& object, const std::string& key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// A token id as OpenAI writes it in logit_bias's keys: decimal digits, no sign, no leading zero (so that no two keys
// name the same id).
std::optional<int32_t> token_id_key(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(id);
}

// logit_bias: {"token id": bias in [-100, 100]}, at most kMaxLogitBias ids (the engine checks them against the
// vocabulary).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& body) {
  std::vector<std::pair<int32_t, float>> biases;
  const Json* bias = field(body, "logit_bias");
  if (!bias) return biases;
  if (!bias->is_object()) refuse_type("logit_bias", *bias, "an object of token id -> bias");
  if (bias->size() > kMaxLogitBias) refuse_field("logit_bias", fmt::format("at most {} token ids", kMaxLogitBias));
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string name = "logit_bias." + it.key().substr(0, 32);
    auto id = token_id_key(it.key());
    if (!id) refuse_field(name, "the key must be a token id (decimal digits)");
    if (!it->is_number() || exact_integer_text(*it)) refuse_type(name, *it, "a number from -100 to 100");
    const double value = it->get<double>();
    if (!(value >= -100 && value <= 100)) refuse_field(name, "must be between -100 and 100");
    biases.emplace_back(*id, static_cast<float>(value));
  }
  return biases;
}

uint64_t random_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

Json parse_json_body(std::string_view body) {
  if (body.empty()) throw ApiError(400, "the request body is empty; expected a JSON object", "", "invalid_json");
  Json parsed;
  try {
    parsed = parse_exact_json(body);
  } catch (const JsonLimitError& e) {
    // Depth has always been part of "not a JSON object we read"; size limits are the body being too large.
    if (e.limit() == JsonLimitError::Limit::depth)
      throw ApiError(400, e.about("the request body"), e.path(), "invalid_json");
    throw ApiError(413, e.about("the request body"), e.path(), "json_too_large");
  } catch (const Json::exception& e) {
    // A syntax error (nlohmann names the byte offset and what it expected) or a number beyond a double.
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!parsed.is_object())
    throw ApiError(400, fmt::format("the request body must be a JSON object, got {}", type_name(parsed)), "",
                   "invalid_json");
  return parsed;
}

Json parse_arguments_text(const std::string& text, const std::string& param) {
  if (text.empty()) return Json::object();
  Json parsed;
  try {
    parsed = parse_exact_json(text);
  } catch (const JsonLimitError& e) {
    refuse_field(param, e.about("the JSON text"));
  } catch (const Json::exception&) {
    refuse_field(param, "expected a JSON object (as a string), got text that is not JSON");
  }
  if (!parsed.is_object()) refuse_field(param, "expected a JSON object (as a string)");
  return parsed;
}

namespace {
void check_fields_in(const Json& body, std::initializer_list<std::span<const std::string_view>> lists,
                     std::string_view path, IgnoredFields& unknown) {
  for (const auto& [key, value] : body.items()) {
    if (value.is_null()) continue;  // null is absent: OpenAI SDKs send nulls for fields they leave unset
    bool known = false;
    for (auto list : lists)
      for (auto name : list) known = known || key == name;
    if (!known) unknown.add(std::string(path) + key);
  }
}
}  // namespace

void check_known_fields(const Json& body, std::initializer_list<std::string_view> supported,
                        std::initializer_list<std::string_view> without_effect, std::string_view path,
                        IgnoredFields& unknown) {
  check_fields_in(
      body, {std::span(supported.begin(), supported.size()), std::span(without_effect.begin(), without_effect.size())},
      path, unknown);
}

void refuse_if_present(const Json& body, const std::string& key, const std::string& why, std::string_view path) {
  if (auto it = body.find(key); it != body.end() && !it->is_null()) refuse_field(std::string(path) + key, why);
}

void check_generation_fields(const Json& body, std::initializer_list<std::string_view> route_fields,
                             std::initializer_list<std::string_view> without_effect, IgnoredFields& unknown) {
  check_fields_in(
      body,
      {std::span<const std::string_view>(kGenerationFields), std::span(route_fields.begin(), route_fields.size()),
       std::span(without_effect.begin(), without_effect.size())},
      {}, unknown);
}

std::optional<bool> read_bool(const Json& object, const std::string& key, const std::string& name) {
  const Json* value = field(object, key);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) refuse_type(name, *value, "a boolean");
  return value->get<bool>();
}

std::optional<double> read_number(const Json& object, const std::string& key, const std::string& name, double min,
                                  double max) {
  const Json* value = field(object, key);
  if (!value) return std::nullopt;
  if (exact_integer_text(*value)) refuse_field(name, fmt::format("must be between {} and {}", min, max));
  if (!value->is_number()) refuse_type(name, *value, "a number");
  double number = value->get<double>();
  if (!std::isfinite(number) || number < min || number > max)
    refuse_field(name, fmt::format("must be between {} and {}", min, max));
  return number;
}

std::optional<int64_t> read_integer(const Json& object, const std::string& key, const std::string& name, int64_t min,
                                    int64_t max) {
  const Json* value = field(object, key);
  if (!value) return std::nullopt;
  if (exact_integer_text(*value)) refuse_field(name, fmt::format("must be between {} and {}", min, max));
  if (!value->is_number_integer()) refuse_type(name, *value, "an integer");
  if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(max))
    refuse_field(name, fmt::format("must be between {} and {}", min, max));
  int64_t number = value->get<int64_t>();
  if (number < min || number > max) refuse_field(name, fmt::format("must be between {} and {}", min, max));
  return number;
}

const Json* read_tools(const Json& body) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return nullptr;
  if (!it->is_array()) refuse_field("tools", "expected an array of tools");
  if (it->size() > kMaxTools) refuse_field("tools", fmt::format("at most {} tools", kMaxTools));
  return &*it;
}

std::optional<std::string> read_string(const Json& object, const std::string& key, const std::string& name) {
  const Json* value = field(object, key);
  if (!value) return std::nullopt;
  if (!value->is_string()) refuse_type(name, *value, "a string");
  return value->get<std::string>();
}

SamplingRequest parse_sampling(const Json& body) {
  SamplingRequest request;
  auto& params = request.params;
  if (auto n = read_integer(body, "n", "n", 1, kMaxChoices)) request.n = static_cast<int32_t>(*n);
  if (auto best_of = read_integer(body, "best_of", "best_of", std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max());
      best_of && *best_of != 1)
    refuse_field("best_of", "only best_of=1 is supported");
  params.logit_bias = parse_logit_bias(body);

  if (auto v = read_number(body, "temperature", "temperature", 0, 2)) params.temperature = static_cast<float>(*v);
  if (auto v = read_number(body, "top_p", "top_p", 0, 1)) {
    if (*v <= 0) refuse_field("top_p", "must be greater than 0 and at most 1");
    params.top_p = static_cast<float>(*v);
  }
  // -1 is vLLM's spelling of "off", 0 is ours.
  if (auto v = read_integer(body, "top_k", "top_k", -1, 1 << 30)) params.top_k = static_cast<int32_t>(*v < 0 ? 0 : *v);
  if (auto v = read_number(body, "min_p", "min_p", 0, 1)) params.min_p = static_cast<float>(*v);
  if (auto v = read_number(body, "presence_penalty", "presence_penalty", -2, 2))
    params.presence_penalty = static_cast<float>(*v);
  if (auto v = read_number(body, "frequency_penalty", "frequency_penalty", -2, 2))
    params.frequency_penalty = static_cast<float>(*v);
  if (auto v = read_number(body, "repetition_penalty", "repetition_penalty", 0, 10)) {
    if (*v <= 0) refuse_field("repetition_penalty", "must be greater than 0");
    params.repetition_penalty = static_cast<float>(*v);
  }

  if (const Json* seed = field(body, "seed")) {
    if (exact_integer_text(*seed)) refuse_field("seed", "must fit in 64 bits");
    if (!seed->is_number_integer()) refuse_type("seed", *seed, "an integer");
    // Negative seeds are valid OpenAI input; they map onto the same 64 bits.
    params.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    params.seed = random_seed();
  }

  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      params.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings) refuse_field("stop", fmt::format("at most {} stop strings", kMaxStopStrings));
      for (size_t i = 0; i < stop->size(); ++i) {
        const Json& item = (*stop)[i];
        if (!item.is_string()) refuse_type(fmt::format("stop[{}]", i), item, "a string");
        params.stop.push_back(item.get<std::string>());
      }
    } else {
      refuse_type("stop", *stop, "a string or an array of strings");
    }
    for (size_t i = 0; i < params.stop.size(); ++i)
      if (params.stop[i].empty()) refuse_field(fmt::format("stop[{}]", i), "a stop string must not be empty");
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) refuse_type("stop_token_ids", *ids, "an array of token ids");
    if (ids->size() > 256) refuse_field("stop_token_ids", "at most 256 stop token ids");
    for (size_t i = 0; i < ids->size(); ++i) {
      const Json& id = (*ids)[i];
      std::string name = fmt::format("stop_token_ids[{}]", i);
      if (!id.is_number_integer()) refuse_type(name, id, "a token id");
      if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                                  : id.get<int64_t>() < 0)
        refuse_field(name, "not a token id");
      params.stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (auto v = read_bool(body, "ignore_eos", "ignore_eos")) params.ignore_eos = *v;
  if (auto v = read_bool(body, "return_token_ids", "return_token_ids")) request.return_token_ids = *v;
  // duet's own: false keeps the server's drafts (--draft) away from this request; its tokens are the same either way.
  if (auto v = read_bool(body, "speculative", "speculative")) params.speculative = *v;

  auto max_tokens = read_integer(body, "max_tokens", "max_tokens", 1, std::numeric_limits<int32_t>::max());
  auto max_completion_tokens =
      read_integer(body, "max_completion_tokens", "max_completion_tokens", 1, std::numeric_limits<int32_t>::max());
  if (max_tokens && max_completion_tokens && *max_tokens != *max_completion_tokens)
    refuse_field("max_completion_tokens", "max_tokens and max_completion_tokens disagree; send one");
  request.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  return request;
}

int32_t resolve_max_tokens(std::optional<int64_t> asked, int32_t prompt_tokens, int32_t default_tokens, int32_t context,
                           const std::string& prompt_param) {
  const int32_t room = context - prompt_tokens;
  if (room <= 0)
    throw ApiError(400,
                   fmt::format("this model's context is {} tokens and the prompt alone has {}, leaving no room for a "
                               "completion",
                               context, prompt_tokens),
                   prompt_param, "context_length_exceeded");
  // Clients ask budgets their own models allow (8000 and more); what the context cannot hold ends with `length`.
  return static_cast<int32_t>(std::min<int64_t>(asked.value_or(default_tokens), room));
}

StreamRequest parse_stream(const Json& body, IgnoredFields& unknown) {
  StreamRequest request;
  if (auto v = read_bool(body, "stream", "stream")) request.stream = *v;
  if (const Json* options = field(body, "stream_options")) {
    if (!options->is_object()) refuse_type("stream_options", *options, "an object");
    if (!request.stream) refuse_field("stream_options", "only allowed when stream is true");
    // include_obfuscation pads chunks against length side channels on OpenAI's side; accepted without effect.
    check_known_fields(*options, {"include_usage"}, {"include_obfuscation"}, "stream_options.", unknown);
    read_bool(*options, "include_obfuscation", "stream_options.include_obfuscation");
    if (auto v = read_bool(*options, "include_usage", "stream_options.include_usage")) request.include_usage = *v;
  }
  return request;
}

ClientTags parse_client_tags(const Json& body) {
  return {read_string(body, "user", "user").value_or(""),
          read_string(body, "safety_identifier", "safety_identifier").value_or(""),
          read_string(body, "prompt_cache_key", "prompt_cache_key").value_or("")};
}

void check_model(const Json& body, const std::string& served_model_name) {
  auto model = read_string(body, "model", "model");
  if (model && *model != served_model_name)
    throw ApiError(404,
                   fmt::format("the model `{}` does not exist; this server serves `{}`", *model, served_model_name),
                   "model", "model_not_found");
}

}  // namespace duet::server
