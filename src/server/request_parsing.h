#pragma once
// Reading request bodies: the JSON itself, the field policy (known fields are read and type-checked, unknown ones
// ignored and named back, ignored_fields.h) and the sampling fields both OpenAI routes share, each checked for type
// and range.
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/ignored_fields.h"

namespace duet::server {

// Request bodies keep the client's key order (and integers of any length, base/exact_json.h): tool schemas and
// tool-call arguments reach the chat template as the client wrote them, as Python's json.loads gives them to
// transformers' `tojson`. nlohmann::json would sort the keys and change the prompt.
using Json = nlohmann::ordered_json;

// Parses a request body that must be a JSON object (valid UTF-8, nesting <= kMaxJsonDepth), as Python's json.loads
// reads it (key order kept, a repeated key at its first place with its last value). ApiError 400.
Json parse_json_body(std::string_view body);

// Tool-call arguments a client sends as a JSON string (OpenAI's shape), read like a body: an object (an empty string
// is {}), keys in order, within the same limits; refused naming `param` otherwise.
Json parse_arguments_text(const std::string& text, const std::string& param);

// Every key of `body` whose value is not null and that is in neither `supported` nor `without_effect` (fields the
// route documents as accepted without effect) goes to `unknown` as `path` + key. A null is absent.
void check_known_fields(const Json& body, std::initializer_list<std::string_view> supported,
                        std::initializer_list<std::string_view> without_effect, std::string_view path,
                        IgnoredFields& unknown);

// A field the route knows and cannot honour (it would change the answer): refused by name (`path` + key) when present
// and not null.
void refuse_if_present(const Json& body, const std::string& key, const std::string& why, std::string_view path = {});

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
                                                         "return_token_ids",
                                                         "speculative"};

// check_known_fields for a generation route: kGenerationFields plus the route's own.
void check_generation_fields(const Json& body, std::initializer_list<std::string_view> route_fields,
                             std::initializer_list<std::string_view> without_effect, IgnoredFields& unknown);

// Typed readers. A missing field and an explicit null both give nullopt (OpenAI clients send nulls);
// anything of the wrong type or out of range is refused naming `name` (the path shown to the client).
std::optional<bool> read_bool(const Json& object, const std::string& key, const std::string& name);
std::optional<double> read_number(const Json& object, const std::string& key, const std::string& name, double min,
                                  double max);
std::optional<int64_t> read_integer(const Json& object, const std::string& key, const std::string& name, int64_t min,
                                    int64_t max);
std::optional<std::string> read_string(const Json& object, const std::string& key, const std::string& name);
// A request's `tools`: null when absent, else an array of at most kMaxTools entries (refused naming `tools`
// otherwise). Each route reads the entries in its own shape.
constexpr size_t kMaxTools = 256;
const Json* read_tools(const Json& body);

// What both OpenAI routes read the same way. max_tokens stays optional here: its default depends on the
// prompt length (see resolve_max_tokens).
struct SamplingRequest {
  engine::SamplingParams params;
  std::optional<int64_t> max_tokens;
  int32_t n = 1;                  // choices: as many engine requests of the same prompt (see submit_choices)
  bool return_token_ids = false;  // duet/vLLM extension: token ids in each choice (what `duet bench` hashes)
};

// The most token ids one logit_bias may name (OpenAI's limit).
constexpr size_t kMaxLogitBias = 300;

// The most choices one request may ask for (`n`).
constexpr int32_t kMaxChoices = 16;

// The number of stop strings a request may give.
constexpr size_t kMaxStopStrings = 16;

// temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop,
// stop_token_ids, ignore_eos, max_tokens / max_completion_tokens, n, best_of, logit_bias, return_token_ids.
// A request without a seed gets a random one (draws are keyed by seed and position).
SamplingRequest parse_sampling(const Json& body);

// The completion budget: the asked max_tokens, or `default_tokens` (--max-tokens) when none was asked, fitted to
// the room the prompt leaves in the context (the generation then ends with finish_reason `length`). Only a prompt
// that alone fills the context is 400 context_length_exceeded.
int32_t resolve_max_tokens(std::optional<int64_t> asked, int32_t prompt_tokens, int32_t default_tokens, int32_t context,
                           const std::string& prompt_param);

// stream and stream_options.include_usage.
struct StreamRequest {
  bool stream = false;
  bool include_usage = false;
};
StreamRequest parse_stream(const Json& body, IgnoredFields& unknown);

// Who is asking, as the client names it (user, safety_identifier) and the cache hint it sends (prompt_cache_key):
// written to the request's access-log line, never used to answer.
struct ClientTags {
  std::string user;
  std::string safety_identifier;
  std::string prompt_cache_key;
};
ClientTags parse_client_tags(const Json& body);

// `model`, when given, must name the served model (404 model_not_found otherwise).
void check_model(const Json& body, const std::string& served_model_name);

}  // namespace duet::server
