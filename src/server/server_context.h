#pragma once
// What every route needs: the server's options, the engine (behind a narrow interface so the HTTP layer can
// be tested with a scripted stand-in), the tokenizer, the chat renderer and the metrics.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decision/head_sinks.h"
#include "decision/joint_head.h"
#include "decision/request.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "grammar/grammar_cache.h"
#include "model/model.h"
#include "server/http_limits.h"
#include "server/metrics.h"
#include "server/prompt_images.h"
#include "server/response_store.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace duet::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;      // empty: no key needed
  std::string served_model_name;          // `duet serve` fills it (flag, or the model folder's name)
  int32_t max_tokens = 2048;              // the cap per request, and the default when a request names none
  int32_t context = 4096;                 // positions per sequence (prompt + completion), as the engine was sized
  bool enable_thinking = true;            // the chat template's default; a request may override it
  HttpLimits http;                        // sizes, deadlines and connections the HTTP layer allows
  bool log_json = false;                  // --log-format json: access-log lines as JSON objects
  std::vector<std::string> cors_origins;  // --cors-origin: `*` or origins whose pages may call; empty: CORS off
  ResponseStore::Limits responses_store;  // --responses-store-mib, --responses-ttl
  bool web_ui = true;                     // GET / answers the chat page; off with --no-ui
};

// The engine as the routes use it.
class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Throws engine::QueueFull or engine::RequestInvalid like Engine::submit.
  virtual std::shared_ptr<engine::RequestHandle> submit(engine::Request request) = 0;
  // The n choices of one prompt (Engine::submit_choices: one prefill, forked). A stand-in without an engine submits
  // them one by one, cancelling those already in if one is refused.
  virtual std::vector<std::shared_ptr<engine::RequestHandle>> submit_choices(std::vector<engine::Request> requests);
  virtual engine::EngineStats stats() const = 0;
};

// The real thing.
class EngineBackend final : public GenerationBackend {
 public:
  explicit EngineBackend(engine::Engine& engine) : engine_(engine) {}
  std::shared_ptr<engine::RequestHandle> submit(engine::Request request) override {
    return engine_.submit(std::move(request));
  }
  std::vector<std::shared_ptr<engine::RequestHandle>> submit_choices(std::vector<engine::Request> requests) override {
    return engine_.submit_choices(std::move(requests));
  }
  engine::EngineStats stats() const override { return engine_.stats(); }

 private:
  engine::Engine& engine_;
};

// The engine once it exists: `duet serve` listens while the model loads, and the HTTP layer lets no request but
// /health reach a route until ServerContext::ready, so submit() before set() is not expected (it answers 429).
class LateEngineBackend final : public GenerationBackend {
 public:
  void set(engine::Engine* engine) { engine_.store(engine, std::memory_order_release); }
  std::shared_ptr<engine::RequestHandle> submit(engine::Request request) override {
    engine::Engine* engine = engine_.load(std::memory_order_acquire);
    if (!engine) throw engine::QueueFull("engine: the model is still loading");
    return engine->submit(std::move(request));
  }
  std::vector<std::shared_ptr<engine::RequestHandle>> submit_choices(std::vector<engine::Request> requests) override {
    engine::Engine* engine = engine_.load(std::memory_order_acquire);
    if (!engine) throw engine::QueueFull("engine: the model is still loading");
    return engine->submit_choices(std::move(requests));
  }
  engine::EngineStats stats() const override {
    engine::Engine* engine = engine_.load(std::memory_order_acquire);
    return engine ? engine->stats() : engine::EngineStats{};
  }

 private:
  std::atomic<engine::Engine*> engine_{nullptr};
};

// What POST /v1/systemone needs beyond the chat routes: the joint head and the backbone whose LM head rows it reads.
struct DecisionSupport {
  // Each decision's sink: the joint head on the device beside a CUDA backbone, else on the host.
  std::shared_ptr<const decision::HeadSinks> sinks;
  int32_t max_length = 0;  // the prompt budget: the reference's 16384, or less when --context is smaller
  // Decisions run through the backbone's runtime adapter (`duet serve --clef`); chat never does.
  engine::AdapterUse adapter = engine::AdapterUse::none;
  // Which requests are taken (`duet serve --decision-limits`): the hosted service's limits, or the reference's.
  decision::DecisionLimits limits = decision::DecisionLimits::hosted;
};

using ChatRenderer =
    std::function<std::string(const std::vector<tokenizer::ChatMessage>&, const tokenizer::ChatOptions&)>;

struct ServerContext {
  ServerOptions options;
  GenerationBackend& backend;
  const tokenizer::Tokenizer& tokenizer;
  ChatRenderer render_chat;  // tokenizer::render_chat in `duet serve`
  ServerMetrics metrics;
  int64_t started_at = 0;  // unix seconds, reported as the model's `created`
  // Set when the model folder holds a joint head.
  std::optional<DecisionSupport> decisions;
  // Structured outputs' compiled grammars over this tokenizer's vocabulary (null: response_format json is refused).
  std::shared_ptr<grammar::GrammarCache> grammars = nullptr;
  // False while `duet serve` loads the model: /health answers 503 `loading`, every other route 503 `model_loading`.
  // Set (release) after the fields above are final; read (acquire) before any route runs.
  std::atomic<bool> ready{true};
  // Stored responses of POST /v1/responses (store: true), per API key; its limits are set before the server starts.
  ResponseStore responses{};
  // Set when the model's vision tower loaded: chat messages may carry images. Without it, image parts are refused
  // (400, naming the part) with `no_vision` as the reason.
  std::optional<VisionSupport> vision{};
  std::string no_vision = "this model has no vision tower";
};

}  // namespace duet::server
