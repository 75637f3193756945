#pragma once
// Running one request through the engine for a route: submitting with refusals mapped to HTTP errors, then
// either collecting the whole answer or streaming it as server-sent events. A stream whose client goes away
// cancels its request, so the slot frees at the engine's next step.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/server_context.h"

namespace httplib {
struct Response;
}

namespace duet::server {

// engine::QueueFull -> 429 with Retry-After; RequestInvalid -> 400 with its code, param `prompt_param`.
std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param);

struct CollectedGeneration {
  std::vector<engine::TokenEvent> tokens;
  engine::FinishedEvent finished;
  std::string text;  // every token's text and the tail
};

// Waits for the FinishedEvent. An engine error is answered 500.
CollectedGeneration collect_generation(ServerContext& context, engine::RequestHandle& handle);

// Turns engine events into SSE text for one route's chunk format.
class StreamFormatter {
 public:
  virtual ~StreamFormatter() = default;
  virtual std::string start() { return {}; }
  virtual std::string tokens(std::span<const engine::TokenEvent> tokens) = 0;
  // The last chunk(s) before `data: [DONE]`. An engine error is sent as an `error` event instead.
  virtual std::string finish(const engine::FinishedEvent& finished) = 0;
};

void stream_generation(ServerContext& context, httplib::Response& res, std::shared_ptr<engine::RequestHandle> handle,
                       std::unique_ptr<StreamFormatter> formatter);

// A fresh id with a prefix ("chatcmpl-", "cmpl-", "call_").
std::string random_id(std::string_view prefix);
int64_t unix_now();

// OpenAI's usage object.
nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens);

// What every chunk of a stream repeats (id, object, created, model), with "usage": null when the client asked
// for usage (stream_options.include_usage): it then comes in a last chunk of its own, usage_chunk.
nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage);
// That last chunk, as an SSE event: `header` with no choices and the finished request's usage.
std::string usage_chunk(nlohmann::json header, const engine::FinishedEvent& finished);

// The text of one token for logprobs output, and its bytes (the token may be part of a UTF-8 character).
std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id);
nlohmann::json token_bytes(const std::string& text);

}  // namespace duet::server
