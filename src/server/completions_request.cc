#include "server/completions_request.h"

#include <fmt/format.h>

#include <limits>

#include "base/exact_json.h"
#include "server/errors.h"

namespace duet::server {
namespace {

std::vector<int32_t> parse_token_ids(const Json& ids, const std::string& name) {
  std::vector<int32_t> prompt;
  prompt.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    std::string id_name = fmt::format("{}[{}]", name, i);
    if (exact_integer_text(id)) refuse_field(id_name, "not a token id");  // beyond 64 bits
    if (!id.is_number_integer()) refuse_field(id_name, "expected a token id (an integer)");
    if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                                : id.get<int64_t>() < 0)
      refuse_field(id_name, "not a token id");
    prompt.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return prompt;
}

// prompt: a string, an array of token ids, or a batch of exactly one of those.
std::vector<int32_t> parse_prompt(const Json& body, const tokenizer::Tokenizer& tokenizer) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) refuse_field("prompt", "missing");
  std::vector<int32_t> prompt;
  if (it->is_string()) {
    prompt = tokenizer.encode(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->empty()) refuse_field("prompt", "must not be empty");
    const Json& first = it->front();
    if (first.is_number() || exact_integer_text(first)) {
      prompt = parse_token_ids(*it, "prompt");
    } else if (it->size() != 1) {
      refuse_field("prompt", "one prompt per request; batched prompts are not supported");
    } else if (first.is_string()) {
      prompt = tokenizer.encode(first.get<std::string>());
    } else if (first.is_array()) {
      prompt = parse_token_ids(first, "prompt[0]");
    } else {
      refuse_field("prompt[0]", "expected a string or an array of token ids");
    }
  } else {
    refuse_field("prompt", "expected a string or an array of token ids");
  }
  if (prompt.empty()) refuse_field("prompt", "the prompt has no tokens");
  return prompt;
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body, const std::string& served_model_name,
                                           const tokenizer::Tokenizer& tokenizer) {
  CompletionRequest request;
  check_generation_fields(body, {"prompt", "best_of", "echo", "suffix", "user", "response_format"}, {},
                          request.ignored);
  check_model(body, served_model_name);
  if (read_bool(body, "echo", "echo").value_or(false)) refuse_field("echo", "echo is not supported");
  if (auto suffix = read_string(body, "suffix", "suffix"); suffix && !suffix->empty())
    refuse_field("suffix", "suffix (insertion) is not supported");
  request.sampling = parse_sampling(body);
  request.stream = parse_stream(body, request.ignored);
  if (auto logprobs = read_integer(body, "logprobs", "logprobs", 0, 20)) {
    request.logprobs = static_cast<int32_t>(*logprobs);
    request.sampling.params.top_logprobs = *request.logprobs;
  }
  request.prompt = parse_prompt(body, tokenizer);
  request.client = parse_client_tags(body);
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null())
    request.format = parse_response_format(*it, "response_format");
  return request;
}

}  // namespace duet::server
