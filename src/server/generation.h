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
#include "server/http_types.h"
#include "server/ids.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "server/sse.h"

namespace duet::server {

// engine::QueueFull -> 429 with Retry-After; RequestInvalid -> 400 with its code, param `prompt_param`.
std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param);

// A request for n choices (OpenAI's `n`): n engine requests of the same prompt, choice i drawing with seed + i so
// that sampled choices differ (greedy ones are equal), submitted together so the engine prefills the prompt once and
// forks it (Engine::submit_choices); refusals as for submit_request, for all n at once.
using Choices = std::vector<std::shared_ptr<engine::RequestHandle>>;
Choices submit_choices(ServerContext& context, const engine::Request& request, int32_t n,
                       const std::string& prompt_param);

struct CollectedGeneration {
  std::vector<engine::TokenEvent> tokens;
  engine::FinishedEvent finished;
  std::string text;  // every token's text and the tail
};

// What a finished request used: its prompt once (the choices share it), the completion tokens of every choice, and
// the first choice's time to first token.
struct GenerationUsage {
  int32_t prompt_tokens = 0, completion_tokens = 0;
  int32_t cached_tokens = 0;  // of prompt_tokens, resumed from the prompt cache
  double time_to_first_token_s = 0;
  std::optional<double> decision_prefill_s, decision_head_s;  // a decision's two phases (engine::FinishedEvent)
};

// Turns engine events into SSE text for one route's chunk format; `choice` says whose events they are.
class StreamFormatter {
 public:
  virtual ~StreamFormatter() = default;
  virtual std::string start() { return {}; }
  virtual std::string tokens(size_t choice, std::span<const engine::TokenEvent> tokens) = 0;
  // The choice's last chunk(s). An engine error is sent as an `error` event instead.
  virtual std::string finish(size_t choice, const engine::FinishedEvent& finished) = 0;
  // What ends the stream once every choice finished: for the Chat Completions formats the usage chunk (when asked
  // for) and `data: [DONE]`; the Responses API ended with its response.completed event already.
  virtual std::string end(const GenerationUsage& usage) { return sse_done(); }
};

// The body of a response that an engine request's events make (n requests for n choices). The transport feeds
// it the events on the connection's event loop; it never blocks.
class GenerationBody {
 public:
  GenerationBody(ServerContext& context, Choices choices);
  virtual ~GenerationBody() = default;

  // Asks the engine to stop every choice (any thread may call it, any number of times).
  void cancel();
  // `listener` runs (on the engine thread) whenever a choice has events; nullptr detaches (see RequestHandle).
  void set_listener(const std::function<void()>& listener);
  virtual bool streams() const = 0;
  // Streams: what to send before any event (the first chunk).
  virtual std::string begin() { return {}; }
  // Takes the events ready on every choice, each choice's in order; false when none was ready. Streams: `out` gets
  // the SSE text for them (the end of the stream after the last choice finished). Whole answers collect them.
  bool take_ready(std::string& out);
  bool done() const { return finished_ == choices_.size(); }
  // The token counts and time to first token (for the access log), once done().
  std::optional<GenerationUsage> usage() const;
  ClientTags client;    // who the client says asks (user, safety_identifier): the route sets it for the log
  HttpHeaders headers;  // the route's own headers, added to the whole answer (a stream's head carries them already)
  // Whole answers, once done(): the route's JSON, or a 500 naming the engine's error.
  virtual HttpResponse answer() { return {}; }

 protected:
  virtual std::string on_tokens(size_t choice, std::vector<engine::TokenEvent>& tokens) = 0;
  virtual std::string on_finished(size_t choice, engine::FinishedEvent& finished) = 0;
  // After the last choice finished.
  virtual std::string on_done(const GenerationUsage& usage) { return {}; }
  ServerContext& context_;

 private:
  std::string take_choice(size_t choice, std::vector<engine::Event>& events);

  Choices choices_;
  std::vector<bool> choice_done_;
  size_t finished_ = 0;
  GenerationUsage usage_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A whole answer: `build` makes the route's response from the finished generation, on the connection's event loop
// (an engine error is answered 500 `engine_error`, "`failed`: the engine's message", without calling it; what it
// throws is answered like a route's throw).
using AnswerBuilder = std::function<HttpResponse(std::span<const CollectedGeneration> choices)>;
HttpResponse collect_generation(ServerContext& context, Choices choices, AnswerBuilder build,
                                std::string failed = "generation failed");
// A stream of server-sent events in the formatter's chunk format, ended as the formatter ends it.
HttpResponse stream_generation(ServerContext& context, Choices choices, std::unique_ptr<StreamFormatter> formatter);

// A generation answered as its request asks: a stream in the format `formatter` makes, or a whole answer `build`
// makes; the client's tags (user, safety_identifier) go to the request's access-log line either way, and `headers`
// (the ignored fields' header) go on the answer either way.
HttpResponse generation_response(ServerContext& context, Choices choices, bool stream,
                                 const std::function<std::unique_ptr<StreamFormatter>()>& formatter,
                                 AnswerBuilder build, const ClientTags& client, HttpHeaders headers = {});

// OpenAI's usage object.
// OpenAI's usage, with prompt_tokens_details.cached_tokens: the prompt tokens the prompt cache resumed.
nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens, int32_t cached_tokens);

// A whole answer (chat.completion, text_completion): its choices (choice i made from generations[i]), with the
// generated ids added when the request asked for them (return_token_ids), in the envelope both routes share.
struct AnswerHeader {
  const std::string& id;
  std::string_view object;
  int64_t created;
  const std::string& model;
};
nlohmann::json whole_answer_json(const AnswerHeader& header, nlohmann::json choices, bool return_token_ids,
                                 std::span<const CollectedGeneration> generations);

// What every chunk of a stream repeats (id, object, created, model), with "usage": null when the client asked
// for usage (stream_options.include_usage): it then comes in a last chunk of its own, usage_chunk.
nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage);
// That last chunk, as an SSE event: `header` with no choices and the finished request's usage.
std::string usage_chunk(nlohmann::json header, const GenerationUsage& usage);

// The text of one token for logprobs output (U+FFFD where it holds part of a UTF-8 character), and its raw bytes.
std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id);
nlohmann::json token_bytes(const tokenizer::Tokenizer& tokenizer, int32_t id);

}  // namespace duet::server
