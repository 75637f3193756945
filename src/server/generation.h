#pragma once
// Running one request through the engine for a route: submitting with refusals mapped to HTTP errors, then a
// response body that the request's events fill, taken on the connection's event loop without a thread waiting:
// either a whole answer built when the request finishes, or a stream of server-sent events.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/request_parsing.h"
#include "server/http_types.h"
#include "server/server_context.h"
#include "server/sse.h"

namespace duet::server {

// engine::QueueFull -> 429 with Retry-After; RequestInvalid -> 400 with its code, param `prompt_param`.
std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param);

struct CollectedGeneration {
  std::vector<engine::TokenEvent> tokens;
  engine::FinishedEvent finished;
  std::string text;  // every token's text and the tail
};

// Turns engine events into SSE text for one route's chunk format.
class StreamFormatter {
 public:
  virtual ~StreamFormatter() = default;
  virtual std::string start() { return {}; }
  virtual std::string tokens(std::span<const engine::TokenEvent> tokens) = 0;
  // The last chunk(s) before `data: [DONE]`. An engine error is sent as an `error` event instead.
  virtual std::string finish(const engine::FinishedEvent& finished) = 0;
  // What ends the stream after finish(): `data: [DONE]` for the Chat Completions formats; the Responses API
  // ends with its response.completed event instead.
  virtual std::string end() { return sse_done(); }
};

// The body of a response that an engine request's events make. The transport feeds it the events on the
// connection's event loop; it never blocks.
class GenerationBody {
 public:
  GenerationBody(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle);
  virtual ~GenerationBody() = default;

  engine::RequestHandle& handle() { return *handle_; }
  virtual bool streams() const = 0;
  // Streams: what to send before any event (the first chunk).
  virtual std::string begin() { return {}; }
  // Takes the next events in order. Streams: returns the SSE text to send for them (`data: [DONE]` after the last).
  // Whole answers: collects them and returns nothing.
  std::string take(std::vector<engine::Event>& events);
  bool done() const { return done_; }
  // The finished request's token counts and time to first token (for the access log), once done().
  struct Usage {
    int32_t prompt_tokens = 0, completion_tokens = 0;
    double time_to_first_token_s = 0;
  };
  std::optional<Usage> usage() const { return usage_; }
  ClientTags client;  // who the client says asks (user, safety_identifier): the route sets it for the log
  // Whole answers, once done(): the route's JSON, or a 500 naming the engine's error.
  virtual HttpResponse answer() { return {}; }

 protected:
  virtual std::string on_tokens(std::vector<engine::TokenEvent>& tokens) = 0;
  virtual std::string on_finished(engine::FinishedEvent& finished) = 0;
  ServerContext& context_;

 private:
  std::shared_ptr<engine::RequestHandle> handle_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool done_ = false;
  std::optional<Usage> usage_;
};

// A whole answer: `build` makes the route's response from the finished generation, on the connection's event loop
// (an engine error is answered 500 `engine_error`, "`failed`: the engine's message", without calling it; what it
// throws is answered like a route's throw).
using AnswerBuilder = std::function<HttpResponse(const CollectedGeneration&)>;
HttpResponse collect_generation(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle,
                                AnswerBuilder build, std::string failed = "generation failed");
// A stream of server-sent events in the formatter's chunk format, ended by `data: [DONE]`.
HttpResponse stream_generation(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle,
                               std::unique_ptr<StreamFormatter> formatter);

// A generation answered as its request asks: a stream in the format `formatter` makes, or a whole answer `build`
// makes; the client's tags (user, safety_identifier) go to the request's access-log line either way.
HttpResponse generation_response(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle, bool stream,
                                 const std::function<std::unique_ptr<StreamFormatter>()>& formatter,
                                 AnswerBuilder build, const ClientTags& client);

// A fresh id with a prefix ("chatcmpl-", "cmpl-", "call_").
std::string random_id(std::string_view prefix);
int64_t unix_now();

// OpenAI's usage object.
nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens);

// A whole answer (chat.completion, text_completion): its one choice, with the generated ids added when the request
// asked for them (return_token_ids), in the envelope both routes share.
struct AnswerHeader {
  const std::string& id;
  std::string_view object;
  int64_t created;
  const std::string& model;
};
nlohmann::json whole_answer_json(const AnswerHeader& header, nlohmann::json choice, bool return_token_ids,
                                 const CollectedGeneration& generation);

// What every chunk of a stream repeats (id, object, created, model), with "usage": null when the client asked
// for usage (stream_options.include_usage): it then comes in a last chunk of its own, usage_chunk.
nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage);
// That last chunk, as an SSE event: `header` with no choices and the finished request's usage.
std::string usage_chunk(nlohmann::json header, const engine::FinishedEvent& finished);

// The text of one token for logprobs output (U+FFFD where it holds part of a UTF-8 character), and its raw bytes.
std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id);
nlohmann::json token_bytes(const tokenizer::Tokenizer& tokenizer, int32_t id);

}  // namespace duet::server
