#pragma once
// A POST /v1/completions body read into what the engine takes: the prompt (text, tokenized, or token ids), sampling,
// streaming, the legacy integer logprobs and response_format, each field checked and refused by name.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/ignored_fields.h"
#include "server/output_format.h"
#include "server/request_parsing.h"
#include "tokenizer/tokenizer.h"

namespace duet::server {

struct CompletionRequest {
  std::vector<int32_t> prompt;
  SamplingRequest sampling;
  StreamRequest stream;
  std::optional<int32_t> logprobs;  // the legacy integer: how many alternatives per token
  ClientTags client;
  IgnoredFields ignored;  // unknown fields the body carried
  OutputFormat format;    // response_format, as on chat (output_format.h)
};

// `model`, when given, must be `served_model_name`; a text prompt is tokenized by `tokenizer`.
CompletionRequest parse_completion_request(const Json& body, const std::string& served_model_name,
                                           const tokenizer::Tokenizer& tokenizer);

}  // namespace duet::server
