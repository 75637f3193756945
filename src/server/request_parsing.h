#pragma once
// Reading request bodies: the JSON itself, the field policy (supported, ignored, everything else refused by
// name) and the sampling fields both OpenAI routes share, each checked for type and range.
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace duet::server {

using Json = nlohmann::json;

// Parses a request body that must be a JSON object (valid UTF-8, nesting <= kMaxJsonDepth). ApiError 400.
Json parse_json_body(std::string_view body);

// Every key of `body` must be in `supported` or `ignored`; the first other one is refused by name, so a field
// that would change the answer is never dropped silently.
void check_known_fields(const Json& body, std::initializer_list<std::string_view> supported,
                        std::initializer_list<std::string_view> ignored);

// The fields both generation routes (chat and completions) accept: the model, streaming, and the sampling and
// stop fields; each route reads `logprobs` its own way.
inline constexpr std::string_view kGenerationFields[] = {"model",
                                                         "stream",
                                                         "stream_options",
                                                         "max_tokens",
                                                         "temperature",
                                                         "top_p",
                                                         "top_k",
                                                         "min_p",
                                                         "presence_penalty",
                                                         "frequency_penalty",
                                                         "repetition_penalty",
                                                         "seed",
                                                         "stop",
                                                         "stop_token_ids",
                                                         "ignore_eos",
                                                         "n",
                                                         "logprobs",
                                                         "logit_bias",
                                                         "return_token_ids"};

// check_known_fields for a generation route: kGenerationFields plus the route's own.
void check_generation_fields(const Json& body, std::initializer_list<std::string_view> route_fields,
                             std::initializer_list<std::string_view> ignored);

// Typed readers. A missing field and an explicit null both give nullopt (OpenAI clients send nulls);
// anything of the wrong type or out of range is refused naming `name` (the path shown to the client).
std::optional<bool> read_bool(const Json& object, const std::string& key, const std::string& name);
std::optional<double> read_number(const Json& object, const std::string& key, const std::string& name, double min,
                                  double max);
std::optional<int64_t> read_integer(const Json& object, const std::string& key, const std::string& name, int64_t min,
                                    int64_t max);
std::optional<std::string> read_string(const Json& object, const std::string& key, const std::string& name);

// What both OpenAI routes read the same way. max_tokens stays optional here: its default depends on the
// prompt length (see resolve_max_tokens).
struct SamplingRequest {
  engine::SamplingParams params;
  std::optional<int64_t> max_tokens;
  bool return_token_ids = false;  // duet/vLLM extension: token ids in each choice (what `duet bench` hashes)
};

// The number of stop strings a request may give.
constexpr size_t kMaxStopStrings = 16;

// temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop,
// stop_token_ids, ignore_eos, max_tokens / max_completion_tokens, n, best_of, logit_bias, return_token_ids.
// A request without a seed gets a random one (draws are keyed by seed and position).
SamplingRequest parse_sampling(const Json& body);

// The completion budget: the asked max_tokens (refused above `cap`), or min(cap, room left in the context).
// A prompt that leaves no room, or an ask that does not fit, is 400 context_length_exceeded.
int32_t resolve_max_tokens(std::optional<int64_t> asked, int32_t prompt_tokens, int32_t cap, int32_t context,
                           const std::string& prompt_param);

// stream and stream_options.include_usage.
struct StreamRequest {
  bool stream = false;
  bool include_usage = false;
};
StreamRequest parse_stream(const Json& body);

// `model`, when given, must name the served model (404 model_not_found otherwise).
void check_model(const Json& body, const std::string& served_model_name);

}  // namespace duet::server
