#pragma once
// A request as the engine takes it, and the events it sends back.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backend/sampling_knobs.h"
#include "base/error.h"
#include "engine/decision_sink.h"

namespace duet::grammar {
class CompiledGrammar;
}

namespace duet::engine {

// A request's sampling: the knobs (backend/sampling_knobs.h) and what the engine does around the draw.
struct SamplingParams : backend::SamplingKnobs {
  // OpenAI's logit_bias: added to these ids' logits after the penalties (each id once; -100 bans, +100 forces).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;  // draws are keyed by (seed, position); the server picks a random seed when none is given
  int32_t max_tokens = 256;
  std::vector<std::string> stop;        // stop strings (matched on detokenized text; needs a tokenizer)
  std::vector<int32_t> stop_token_ids;  // in addition to the tokenizer's eos unless ignore_eos
  bool ignore_eos = false;
  int32_t top_logprobs = -1;        // -1: no logprobs; 0: the sampled token's; N: also the N most likely
  bool skip_special_tokens = true;  // leave special tokens out of the streamed text (their ids still come)
  // Whether the engine may draft tokens for it and verify them (EngineOptions::draft; the body's "speculative": false
  // opts out). Its tokens are the same either way: drafts only change how many come per step.
  bool speculative = true;
};

enum class FinishReason { stop, length, cancelled, error };
const char* to_string(FinishReason reason);

// generate: prefill the prompt, then sample tokens. decide: prefill the prompt only (sampling is not used), its
// final-norm rows going to `decision` chunk by chunk; the answer is the FinishedEvent's decision_logits.
enum class RequestKind : uint8_t { generate, decide };

// The weights a request's rows run through: the base's alone, or with the runtime adapter (`duet serve --clef`), which
// only decisions use. Chat rows never pass through the adapter, so chat is the same with or without one loaded.
enum class AdapterUse : uint8_t { none, clef };

// One image of a prompt (docs/vision.md 2-5), as the processor left it: its pixel_values and grid (in patches, before
// the merge), and where its run of image tokens starts in the prompt. The engine runs the vision tower on it once,
// before the prompt's first chunk, on the engine thread (EngineOptions::vision).
struct PromptImage {
  std::vector<float> pixel_values;  // [t * h * w, patch row] (model::VisionModel::patch_row_size())
  int32_t t = 1, h = 0, w = 0;
  int32_t first_token = 0;  // the prompt index of its first image token; t * h * w / merge^2 tokens follow
};

struct Request {
  RequestKind kind = RequestKind::generate;
  AdapterUse adapter = AdapterUse::none;
  std::vector<int32_t> prompt;
  // Prompt positions the prompt cache also keeps this prompt's state at (each rounded down to a block end), besides
  // its own last full block. A chat prompt names three: where its generation prompt starts (the next turn of the same
  // conversation repeats everything before it), where its last user turn starts (a retry, an edit or an agent's
  // continuation of that turn repeats everything before it), and where its leading system turn ends (a new
  // conversation with the same system prompt and tools repeats that). Positions of 0 are ignored.
  std::vector<int32_t> cache_hints;
  SamplingParams sampling;
  std::shared_ptr<DecisionSink> decision;  // decide requests
  // A structured output: every sampled token keeps the text a prefix of a document of this grammar, and the request
  // ends (stop) once the document is complete. The grammar holds from the first token, or from the token after
  // `grammar_after` (the model's "</think>": the reasoning before it is free).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::optional<int32_t> grammar_after;
  // The prompt's images in prompt order (null or empty: text). Shared, not copied, by the n choices of one prompt.
  // A prompt with images is never resumed from nor kept in the prompt cache, and is not drafted for by --draft mtp.
  std::shared_ptr<const std::vector<PromptImage>> images;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One generated token; `text` is what the stream decoder released with it (may be empty mid-character).
struct TokenEvent {
  int32_t id = 0;
  std::string text;
  std::optional<float> logprob;
  std::vector<TokenLogprob> top_logprobs;
};

struct FinishedEvent {
  FinishReason reason = FinishReason::stop;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // of prompt_tokens, resumed from the prompt cache instead of prefilled
  int32_t completion_tokens = 0;
  std::string text_tail;  // text released at the end (incomplete UTF-8 flushed), if any
  std::string error;      // for FinishReason::error
  double time_to_first_token_s = 0;
  // Why it stopped, for FinishReason::stop: the stop token id (eos or one of stop_token_ids; it counts in
  // completion_tokens but gets no TokenEvent) or the stop string (its text and what follows are not sent).
  std::optional<int32_t> matched_stop_token;
  std::optional<std::string> matched_stop_string;
  // A decide request that finished with `stop`: the decision head's logits (DecisionSink::finish), and where its time
  // went: from submission to its last prompt chunk computed (queue and prefill), and from then to the answer (the head,
  // with any of its inputs still being gathered and any wait for a decision worker).
  std::vector<float> decision_logits;
  std::optional<double> decision_prefill_s, decision_head_s;
};

using Event = std::variant<TokenEvent, FinishedEvent>;

// Thrown by Engine::submit when the waiting queue is full: the server answers 429 with Retry-After.
class QueueFull : public Error {
 public:
  using Error::Error;
};

// Thrown by Engine::submit once a device error stopped the engine (EngineStats::failure): the server answers 503.
class EngineFailed : public Error {
 public:
  using Error::Error;
};

// Thrown by Engine::submit for a request the engine cannot run (the server answers 400; context overflow is
// `context_length_exceeded`).
class RequestInvalid : public Error {
 public:
  RequestInvalid(std::string message, std::string code) : Error(std::move(message)), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// The consumer side of a request: events in order, ending with exactly one FinishedEvent. A consumer either waits in
// next() or, without holding a thread, sets a listener and takes events with try_next() when it is called.
class RequestHandle : public std::enable_shared_from_this<RequestHandle> {
 public:
  // Blocks until an event is ready or the timeout passes (nullopt).
  std::optional<Event> next(std::chrono::milliseconds timeout);
  // The next event if one is ready; never blocks.
  std::optional<Event> try_next();
  // Called after every push, outside the event lock, on the engine thread or, for the events of a step's tokens, on
  // the engine's notifier thread just after the step (listener_notifier.h): it must be quick and must not throw (an
  // HTTP server posts a drain to the connection's event loop). Called at once if events already wait. Once
  // set_listener(nullptr) returns, the old listener is not running and never runs again.
  void set_listener(std::function<void()> listener);
  // Asks the engine to stop this request; it frees its slot at the next step and sends FinishedEvent
  // (cancelled). Safe to call from any thread, any number of times.
  void cancel();
  bool cancelled() const;

  // Engine side. Within a DeferredListeners scope on this thread (and this handle owned by a shared_ptr), the
  // listener call is left to the scope.
  void push(Event event);

 private:
  friend class ListenerNotifier;
  void notify_listener();

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
  bool cancelled_ = false;
  std::mutex listener_mutex_;  // held while the listener runs, so clearing it waits for a call in progress
  std::function<void()> listener_;
};

}  // namespace duet::engine
