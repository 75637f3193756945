// `duet serve`: load a model and its tokenizer (and its joint head, when it has one), start the engine, and answer
// the OpenAI-compatible HTTP API and System One decisions.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "decision/encoder.h"
#include "decision/head_math.h"
#include "decision/head_sinks.h"
#include "decision/joint_head.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "image/processor_config.h"
#include "model/model.h"
#include "model/vision_model.h"
#include "server/http_server.h"
#include "server/image_fetch.h"
#include "server/server_context.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace duet::cli {
namespace {

struct ServeFlags {
  std::string model_dir;
  server::ServerOptions server;
  engine::EngineOptions engine;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  bool no_thinking = false;
  bool no_ui = false;
  bool no_vision = false;  // skip the vision tower: image parts are refused
  // Remote image URLs: fetched only with --allow-image-urls, within the timeout, never from a private address but the
  // endpoints --allow-image-urls-from-private names.
  bool allow_image_urls = false;
  int image_url_timeout_s = 10;
  std::vector<std::string> image_urls_private;
  int threads = 0;
  std::string backend = "auto";
  std::string clef_dir;                    // a runtime adapter folder: decisions through it, chat from the base alone
  std::string decision_limits = "hosted";  // decision::DecisionLimits by name
  DraftFlags draft;                        // speculative decoding (--draft)
  // HTTP deadlines in seconds (server::HttpLimits holds them as durations).
  int header_timeout_s = 10;
  int body_timeout_s = 60;
  int idle_timeout_s = 30;
  int send_timeout_s = 30;
  int shutdown_grace_s = 30;
  std::string log_format = "text";
  int64_t responses_store_mib = 64;  // stored responses (POST /v1/responses with store: true)
  int64_t responses_ttl_s = 3600;
  // The prompt cache's budget in GiB; negative: the default for the backend (kDefaultPromptCacheGib).
  double prompt_cache_gib = -1;
  double prompt_cache_host_gib = 0;  // its host tier; 0: none
  double memory_limit_gib = 0;       // 0: the GPU's memory, or physical RAM
  // --max-buffered-body-bytes 0: from the machine's memory while the model loads, then from what its plan leaves.
  bool body_budget_from_plan = false;
};

// On a GPU, room for a long agent prompt's pages (a 20K-token prefix of the 9B shape is about 0.7 GiB) and a few
// dozen GDN snapshots; on the CPU, where the whole plan is host RAM and zeroed at start, a little.
constexpr double kDefaultPromptCacheGibGpu = 4.0;
constexpr double kDefaultPromptCacheGibCpu = 0.25;

// One key per line; blank lines and surrounding whitespace are ignored.
std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("--api-key-file {}: cannot read it", path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(file, line)) {
    auto begin = line.find_first_not_of(" \t\r");
    auto end = line.find_last_not_of(" \t\r");
    if (begin != std::string::npos) keys.push_back(line.substr(begin, end - begin + 1));
  }
  if (keys.empty()) fail("--api-key-file {}: holds no key", path);
  return keys;
}

void check_flags(const ServeFlags& flags) {
  if (flags.engine.parallel < 1) fail("--parallel {}: must be at least 1", flags.engine.parallel);
  if (flags.engine.context != 0 && flags.engine.context < 2)
    fail("--context {}: must be at least 2 (or 0: the model's length, as memory allows)", flags.engine.context);
  if (flags.engine.queue_limit < 0) fail("--queue-limit {}: must be 0 or more", flags.engine.queue_limit);
  if (flags.engine.kv_cache_tokens < 0)
    fail("--kv-cache-tokens {}: must be 0 (--parallel x --context) or more", flags.engine.kv_cache_tokens);
  if (flags.engine.prefill_chunk < 64 || flags.engine.prefill_chunk % 64 != 0)
    fail("--prefill-chunk {}: must be a positive multiple of 64 (prompts cut at multiples of 64 keep rows exact)",
         flags.engine.prefill_chunk);
  if (!(flags.engine.vision_step_ms >= 0 && flags.engine.vision_step_ms <= 60000))
    fail("--vision-step-ms {}: must be between 0 and 60000", flags.engine.vision_step_ms);
  if (flags.engine.step_token_budget < 1 || flags.engine.step_token_budget > 1 << 20)
    fail("--step-tokens {}: must be between 1 and {}", flags.engine.step_token_budget, 1 << 20);
  if (flags.server.max_tokens < 1) fail("--max-tokens {}: must be at least 1", flags.server.max_tokens);
  if (flags.prompt_cache_gib > 1 << 20) fail("--prompt-cache-gib {}: too large", flags.prompt_cache_gib);
  if (flags.prompt_cache_host_gib < 0 || flags.prompt_cache_host_gib > 1 << 20)
    fail("--prompt-cache-host-gib {}: must be 0 (no host tier) or a size in GiB", flags.prompt_cache_host_gib);
  if (flags.prompt_cache_host_gib > 0 && flags.prompt_cache_gib == 0)
    fail(
        "--prompt-cache-host-gib {} with --prompt-cache-gib 0: the host tier keeps what the device tier lets go, and "
        "there is none",
        flags.prompt_cache_host_gib);
  if (flags.memory_limit_gib < 0 || flags.memory_limit_gib > 1 << 20)
    fail("--memory-limit-gib {}: must be 0 (the GPU's memory, or RAM) or a size in GiB", flags.memory_limit_gib);
  const server::HttpLimits& http = flags.server.http;
  if (http.max_body_bytes < 1024) fail("--max-body-bytes {}: must be at least 1024", http.max_body_bytes);
  if (http.max_header_bytes < 1024) fail("--max-header-bytes {}: must be at least 1024", http.max_header_bytes);
  if (http.max_buffered_body_bytes != 0 && http.max_buffered_body_bytes < http.max_body_bytes)
    fail("--max-buffered-body-bytes {}: must be 0 (from the machine's memory) or at least --max-body-bytes ({})",
         http.max_buffered_body_bytes, http.max_body_bytes);
  if (http.max_connections_per_client < 0)
    fail("--max-connections-per-client {}: must be 0 (no limit) or more", http.max_connections_per_client);
  if (http.max_unsent_bytes < 4096) fail("--max-unsent-bytes {}: must be at least 4096", http.max_unsent_bytes);
  for (auto [flag, seconds] : {std::pair{"--header-timeout", flags.header_timeout_s},
                               {"--body-timeout", flags.body_timeout_s},
                               {"--idle-timeout", flags.idle_timeout_s},
                               {"--send-timeout", flags.send_timeout_s}})
    if (seconds < 1) fail("{} {}: must be at least 1 second", flag, seconds);
  if (flags.responses_store_mib < 0 || flags.responses_store_mib > (int64_t{1} << 20))
    fail("--responses-store-mib {}: must be 0 (keep none) to 1048576", flags.responses_store_mib);
  if (flags.responses_ttl_s < 1) fail("--responses-ttl {}: must be at least 1 second", flags.responses_ttl_s);
  if (flags.shutdown_grace_s < 0) fail("--shutdown-grace {}: must be 0 or more seconds", flags.shutdown_grace_s);
  if (flags.server.port < 0 || flags.server.port > 65535) fail("--port {}: not a port", flags.server.port);
  if (flags.threads < 0) fail("--threads {}: must be 0 (all cores) or more", flags.threads);
  if (flags.engine.decision_workers < 0 || flags.engine.decision_workers > 256)
    fail("--decision-workers {}: must be 0 (from the cores) to 256", flags.engine.decision_workers);
  for (const auto& key : flags.api_keys)
    if (key.empty()) fail("--api-key: an empty key would accept anyone; leave the flag out instead");
  if (flags.image_url_timeout_s < 1 || flags.image_url_timeout_s > 600)
    fail("--image-url-timeout {}: must be 1 to 600 seconds", flags.image_url_timeout_s);
  if (!flags.image_urls_private.empty() && !flags.allow_image_urls)
    fail("--allow-image-urls-from-private: remote image URLs are fetched only with --allow-image-urls; give both");
  for (const std::string& text : flags.image_urls_private) {
    const std::optional<server::ImageEndpoint> endpoint = server::parse_image_endpoint(text);
    if (!endpoint) fail("--allow-image-urls-from-private {}: expected ADDRESS:PORT (an IP address, [IPV6]:PORT)", text);
    if (!server::non_public_address(endpoint->address))
      fail("--allow-image-urls-from-private {}: a public address, which --allow-image-urls reaches already", text);
  }
}

void set_http_limits(ServeFlags& flags) {
  server::HttpLimits& http = flags.server.http;
  http.header_timeout = std::chrono::seconds(flags.header_timeout_s);
  http.body_timeout = std::chrono::seconds(flags.body_timeout_s);
  http.idle_timeout = std::chrono::seconds(flags.idle_timeout_s);
  http.send_timeout = std::chrono::seconds(flags.send_timeout_s);
  http.shutdown_grace = std::chrono::seconds(flags.shutdown_grace_s);
  http.max_connections = server::effective_max_connections(http.max_connections);
  flags.body_budget_from_plan = http.max_buffered_body_bytes == 0;
  if (flags.body_budget_from_plan)
    http.max_buffered_body_bytes = server::default_buffered_body_bytes(http.max_body_bytes);
}

// SIGINT/SIGTERM are taken by a thread (sigwait) that stops the server, so shutdown runs outside a handler.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// The most patches the GPU tower is sized for: a 4096 x 4096 image (the stock processor's max_pixels), about 2.5 GB of
// scratch for the 9B's tower.
constexpr int64_t kMaxDevicePatches = 65536;

// The vision tower, when the checkpoint has one, the backend reads images and --no-vision is not set: the engine runs
// it, chat takes image parts (decoded by the checkpoint's preprocessor_config.json). Otherwise image parts are
// refused naming why.
void load_vision(const ServeFlags& flags, const model::Model& model, engine::EngineOptions& engine,
                 server::ServerContext& context) {
  // From the config the model already read: config.json is read again only for a model with a tower.
  if (!model.config().has_vision_tower) {
    context.no_vision = "this model has no vision tower (its config.json has no vision_config)";
    return;
  }
  if (flags.no_vision) {
    context.no_vision = "this server was started with --no-vision";
    log_info("vision tower: not loaded (--no-vision); image parts are refused");
    return;
  }
  if (!model.reads_images()) {
    context.no_vision = "this model does not read images on its backend (it does not apply M-RoPE)";
    log_info("vision tower: not loaded ({}); image parts are refused", context.no_vision);
    return;
  }
  auto vision = model::VisionModel::load(flags.model_dir, model.config().hidden_size);
  const std::string processor_path = (std::filesystem::path(flags.model_dir) / "preprocessor_config.json").string();
  if (!std::filesystem::exists(processor_path))
    fail("{}: missing; a model with a vision tower needs its image processor's settings (or serve with --no-vision)",
         processor_path);
  server::VisionSupport support{.processor = image::ProcessorConfig::load(processor_path),
                                .limits = {},
                                .image_token_id = static_cast<int32_t>(vision->config().image_token_id)};
  const image::PatchLayout& layout = support.processor.layout;
  const model::VisionConfig& c = vision->config();
  if (layout.patch != c.patch_size || layout.temporal != c.temporal_patch_size || layout.merge != c.spatial_merge_size)
    fail("{}: patch_size {}, temporal_patch_size {}, merge_size {} are not the vision tower's {}, {}, {}",
         processor_path, layout.patch, layout.temporal, layout.merge, c.patch_size, c.temporal_patch_size,
         c.spatial_merge_size);
  std::string urls = "http(s) URLs refused without --allow-image-urls";
  if (flags.allow_image_urls) {
    server::ImageFetchOptions fetch{.max_bytes = support.limits.max_bytes,
                                    .timeout = std::chrono::seconds(flags.image_url_timeout_s)};
    for (const std::string& text : flags.image_urls_private)
      fetch.private_allowed.push_back(*server::parse_image_endpoint(text));
    support.fetcher = std::make_shared<server::ImageFetcher>(std::move(fetch));
    urls = fmt::format("http(s) URLs fetched within {} s from public addresses", flags.image_url_timeout_s);
    for (const std::string& text : flags.image_urls_private) urls += " and " + text;
  }
  // With the language model on a GPU the tower runs there too, sized for the largest image the processor makes (at
  // most kMaxDevicePatches: a larger one runs on the host). Its weights and scratch are taken before the memory plan
  // reads what the GPU has free.
  const auto patch_area = static_cast<uint64_t>(c.patch_size * c.patch_size);
  const auto patches = static_cast<int64_t>((support.processor.max_pixels + patch_area - 1) / patch_area);
  vision->set_max_patches(patches);  // the memory plan counts its workspace for the largest image
  if (model.device_memory_bytes() != 0 && model::device_vision_wanted())
    vision->use_device(std::min(patches, kMaxDevicePatches));
  engine.vision = std::move(vision);
  context.vision = support;
  log_info("images: chat takes image_url parts (data: URLs; {}), {} to {} pixels each after resizing", urls,
           support.processor.min_pixels, support.processor.max_pixels);
}

void serve(ServeFlags& flags) {
  check_flags(flags);
  flags.engine.draft = draft_options(flags.draft);
  set_http_limits(flags);
  // A client that disconnects makes a write fail; it must not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below
  if (flags.threads > 0) setenv("DUET_THREADS", std::to_string(flags.threads).c_str(), 1);

  auto& options = flags.server;
  options.api_keys = flags.api_keys;
  if (!flags.api_key_file.empty())
    for (auto& key : read_key_file(flags.api_key_file)) options.api_keys.push_back(std::move(key));
  if (options.served_model_name.empty())
    options.served_model_name = std::filesystem::path(flags.model_dir).lexically_normal().filename().string();
  if (options.served_model_name.empty()) options.served_model_name = "duet";
  options.enable_thinking = !flags.no_thinking;
  options.web_ui = !flags.no_ui;
  options.log_json = flags.log_format == "json";
  options.responses_store = {static_cast<size_t>(flags.responses_store_mib) << 20,
                             std::chrono::seconds(flags.responses_ttl_s)};

  // The tokenizer first (quick): the routes hold it. The model (slow) loads while the server already answers,
  // /health with 503 `loading` and every other route 503 `model_loading`, so orchestrators can tell the two apart.
  auto tokenizer = tokenizer::Tokenizer::load_dir(flags.model_dir);
  std::unique_ptr<model::Model> model;
  std::unique_ptr<engine::Engine> engine;
  server::LateEngineBackend backend;
  server::ServerContext context{options, backend, *tokenizer, tokenizer::render_chat, {}, 0, std::nullopt};
  context.started_at = std::time(nullptr);
  context.responses.set_limits(options.responses_store);
  context.ready = false;

  server::HttpServer http(context);
  int port = http.bind();
  // The first signal stops gracefully (server/http_server.h); a second one exits at once. After run() returns,
  // the thread is woken with `finished` set and leaves.
  std::atomic<bool> finished = false;
  std::thread stopper([&http, &finished, &flags, &context, signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (finished) return;
    if (!context.ready.load(std::memory_order_acquire)) {
      // No request can be running yet: leave without waiting for the model to finish loading.
      log_info("signal {} while loading the model: exiting", signal);
      std::_Exit(0);
    }
    log_info("signal {}: stopping (running requests have {} s; a second signal exits at once)", signal,
             flags.shutdown_grace_s);
    http.stop();
    sigwait(&signals, &signal);
    if (finished) return;
    log_warn("signal {} again: exiting now", signal);
    std::_Exit(128 + signal);
  });
  // Scripts and tests read this line to learn the port (--port 0 picks a free one).
  std::printf("duet serve: %s as `%s` on http://%s:%d (parallel %d, max connections %d; loading the model)\n",
              flags.model_dir.c_str(), options.served_model_name.c_str(), options.host.c_str(), port,
              flags.engine.parallel, options.http.max_connections);
  std::fflush(stdout);
  std::thread serving([&http] { http.run(); });
  auto stop_serving = [&] {
    finished = true;
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
  };

  try {
    log_info("loading {}", flags.model_dir);
    model = model::Model::load(flags.model_dir, flags.backend, flags.clef_dir);
    // A folder with a joint head beside the checkpoint is a decision model too; with --clef the adapter folder's head
    // serves decisions instead. Either is checked in full before serving.
    const std::string& head_dir = flags.clef_dir.empty() ? flags.model_dir : flags.clef_dir;
    std::shared_ptr<const decision::JointHead> head;
    if (!flags.clef_dir.empty() || decision::JointHead::present(head_dir)) {
      head = decision::JointHead::load(head_dir, model->config().hidden_size);
      // The head's products over every prompt row run where the model runs, when its backend offers them (CUDA).
      if (backend::Backend* products = model->products_backend()) {
        decision::set_products_backend(products);
        const decision::JointHead::ProductMemory memory = head->product_memory();
        flags.engine.decision_device_weight_bytes = memory.weight_bytes;
        flags.engine.decision_device_bytes_per_position = memory.bytes_per_position;
      }
      flags.engine.decision_head_bytes = head->weight_bytes();
      flags.engine.decision_bytes_per_position = static_cast<size_t>(head->config().width) * sizeof(float);
    }
    const double cache_gib = flags.prompt_cache_gib >= 0         ? flags.prompt_cache_gib
                             : model->device_memory_bytes() != 0 ? kDefaultPromptCacheGibGpu
                                                                 : kDefaultPromptCacheGibCpu;
    flags.engine.prompt_cache_bytes = static_cast<size_t>(cache_gib * static_cast<double>(1ull << 30));
    flags.engine.prompt_cache_host_bytes =
        static_cast<size_t>(flags.prompt_cache_host_gib * static_cast<double>(1ull << 30));
    flags.engine.memory_limit_bytes = static_cast<size_t>(flags.memory_limit_gib * static_cast<double>(1ull << 30));
    // Before the context is planned: a tower on the GPU holds memory the plan must not count as free.
    load_vision(flags, *model, flags.engine, context);
    if (flags.engine.context == 0) flags.engine.context = engine::default_context(*model, flags.engine);
    // Requests are fitted to what one sequence can hold: its context, and the whole KV cache when that is smaller.
    context.options.context = flags.engine.context;
    if (flags.engine.kv_cache_tokens > 0)
      context.options.context =
          static_cast<int32_t>(std::min<int64_t>(context.options.context, flags.engine.kv_cache_tokens));
    if (const char* step = std::getenv("DUET_TEST_DEVICE_FAULT_STEP"))  // test-only (engine.h)
      flags.engine.test_device_fault_step = std::atoll(step);
    engine = std::make_unique<engine::Engine>(*model, tokenizer.get(), flags.engine);
    if (flags.body_budget_from_plan) {
      // On the CPU backend the weights and the KV cache are host memory: bodies get an eighth of what they leave.
      const engine::MemoryPlan plan = engine::plan_memory(*model, flags.engine);
      const size_t budget =
          server::default_buffered_body_bytes(options.http.max_body_bytes, plan.on_device ? 0 : plan.total_bytes);
      http.set_body_budget(budget);
      log_info("request bodies: up to {} MiB buffered at once (--max-buffered-body-bytes)", budget >> 20);
    }
    // Structured outputs: the vocabulary's trie is built once; masks are as wide as the model's logits.
    context.grammars = std::make_shared<grammar::GrammarCache>(
        grammar::Vocabulary::from_tokenizer(*tokenizer, static_cast<int32_t>(model->config().vocab_size)));
    context.metrics.grammar_cache = context.grammars.get();
    backend.set(engine.get());
    if (head) {
      context.decisions =
          server::DecisionSupport{.sinks = std::make_shared<const decision::HeadSinks>(head, *model),
                                  .max_length = std::min(decision::kReferenceMaxLength, flags.engine.context),
                                  .adapter = model->has_adapter() ? engine::AdapterUse::clef : engine::AdapterUse::none,
                                  .limits = flags.decision_limits == "reference" ? decision::DecisionLimits::reference
                                                                                 : decision::DecisionLimits::hosted};
      log_info(
          "decisions: joint head {} {} (POST /v1/systemone, prompts up to {} tokens{}, {} limits; {} head workers)",
          fmt::format("width {}, {} routing + {} decoder layers", head->config().width, head->config().routing_layers,
                      head->config().layers),
          context.decisions->sinks->on_device() ? "on the GPU" : "on the host", context.decisions->max_length,
          model->has_adapter() ? ", through the runtime adapter" : "", flags.decision_limits,
          engine::decision_worker_count(flags.engine));
    }
  } catch (const std::exception& error) {
    // A model that cannot be served ends the process with its refusal (status 1, as main() answers duet::Error);
    // the server threads are running, so no unwinding past them.
    std::fprintf(stderr, "error: %s\n", error.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  context.ready = true;  // after every write above: the routes read them only once they see it
  log_info("ready: context {}, parallel {}{}", flags.engine.context, flags.engine.parallel,
           context.decisions ? ", decisions" : "");
  // A device error is fatal (duet::DeviceError): the engine has ended every request with it and refuses new ones
  // (503), /health answers 503 with it; after --shutdown-grace seconds the server stops as on SIGTERM and the process
  // exits with status 1, so that a supervisor restarts it.
  std::string failure;
  std::thread watcher([&] {
    while (!finished.load()) {
      if (std::string why = engine->stats().failure; !why.empty()) {
        failure = why;
        log_error("{}; exiting after the grace period ({} s)", why, flags.shutdown_grace_s);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(flags.shutdown_grace_s);
        while (!finished.load() && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!finished.load()) http.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  serving.join();
  stop_serving();
  watcher.join();
  log_info("stopped");
  if (!failure.empty()) fail("{}", failure);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  flags->engine.context = 0;  // the model's length, bounded by memory (engine::default_context)
  flags->model_dir = default_model_dir();
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", flags->model_dir, "Model folder (config.json, safetensors, tokenizer.json)")
      ->capture_default_str();
  cmd->add_option("--host", flags->server.host, "Address to listen on (keep 127.0.0.1 unless behind a proxy)")
      ->capture_default_str();
  cmd->add_option("--port", flags->server.port, "Port to listen on (0: a free one, printed at start)")
      ->capture_default_str();
  cmd->add_option("--parallel", flags->engine.parallel, "Sequences decoded together (state pool slots)")
      ->capture_default_str();
  cmd->add_option("--context", flags->engine.context,
                  "Positions per sequence, prompt + completion (0: the model's max_position_embeddings, as far as "
                  "the memory plan allows)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-tokens", flags->engine.kv_cache_tokens,
                  "Positions of KV cache all sequences share, in pages of 64 (0: --parallel x --context); requests "
                  "wait until the pages for their prompt + max_tokens are free")
      ->capture_default_str();
  cmd->add_option("--memory-limit-gib", flags->memory_limit_gib,
                  "The memory the plan must fit in, in GiB (0: the GPU's memory, or physical RAM); a --context "
                  "whose plan does not fit is refused at start, and the default context shrinks to fit")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-gib", flags->prompt_cache_gib,
                  "Memory for the prompt cache (GDN snapshots and KV pages of prompts that begin alike, resumed "
                  "bit-identical to fresh), in GiB of the backend's memory; 0 turns it off (default: 4 on a GPU, "
                  "0.25 on the CPU)");
  cmd->add_option("--prompt-cache-host-gib", flags->prompt_cache_host_gib,
                  "A second tier for the prompt cache in host RAM (pinned on a GPU), in GiB: entries the "
                  "--prompt-cache-gib budget lets go are copied there instead of dropped, and copied back when a "
                  "prompt resumes from them; 0: none")
      ->capture_default_str();
  cmd->add_option("--max-tokens", flags->server.max_tokens,
                  "Completion tokens for a request that names no max_tokens (any budget is fitted to the context)")
      ->capture_default_str();
  cmd->add_option("--api-key", flags->api_keys, "Require `Authorization: Bearer KEY` (repeatable)");
  cmd->add_option("--api-key-file", flags->api_key_file, "Read accepted keys from a file, one per line");
  cmd->add_flag("--no-thinking", flags->no_thinking,
                "Chat template without reasoning by default (requests may still set chat_template_kwargs)");
  cmd->add_option("--cors-origin", flags->server.cors_origins,
                  "Let browser pages of these origins call the API (`*` for any; repeatable or comma-separated); "
                  "off by default")
      ->delimiter(',');
  cmd->add_option("--log-format", flags->log_format, "Access-log lines (one per request) as text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--served-model-name", flags->server.served_model_name,
                  "The model id clients send and /v1/models lists (default: the model folder's name)");
  auto& http = flags->server.http;
  cmd->add_option("--max-body-bytes", http.max_body_bytes,
                  "Largest request body, chunked ones included (413 above, before reading when declared)")
      ->capture_default_str();
  cmd->add_option("--max-buffered-body-bytes", http.max_buffered_body_bytes,
                  "Request bodies all connections may hold at once; a body past it gets 503 with Retry-After (0: an "
                  "eighth of the memory the model leaves on the host, at most 4 GiB)")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", http.max_header_bytes, "Largest request line + headers (431 above)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", flags->header_timeout_s,
                  "Seconds from a request's first byte to the end of its header (408 after)")
      ->capture_default_str();
  cmd->add_option("--body-timeout", flags->body_timeout_s,
                  "Seconds from the end of a request's header to the end of its body (408 after)")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", flags->idle_timeout_s,
                  "Seconds a connection may wait for its next request before it is closed")
      ->capture_default_str();
  cmd->add_option("--send-timeout", flags->send_timeout_s,
                  "Seconds a client may take no byte of its answer before its connection is closed")
      ->capture_default_str();
  cmd->add_option("--max-unsent-bytes", http.max_unsent_bytes,
                  "Bytes of a stream that may wait for a slow client; past it the stream is cut and cancelled")
      ->capture_default_str();
  cmd->add_option("--max-connections", http.max_connections,
                  "Open connections; more are answered 503 (0: as file descriptors allow, at most 10000)")
      ->capture_default_str();
  cmd->add_option("--max-connections-per-client", http.max_connections_per_client,
                  "Open connections from one client address; more are answered 429 (0: no limit, as behind a proxy)")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", flags->shutdown_grace_s,
                  "Seconds running requests get to finish after SIGTERM/SIGINT before they are cancelled")
      ->capture_default_str();
  cmd->add_flag("--no-ui", flags->no_ui, "Do not answer GET / with the chat page");
  cmd->add_flag("--no-vision", flags->no_vision,
                "Do not load the model's vision tower: chat refuses image parts (by name) instead of reading them");
  cmd->add_option("--vision-step-ms", flags->engine.vision_step_ms,
                  "The vision tower's share of a step beside other requests, in whole tower blocks (at least one a "
                  "step), so a large image does not hold their decode steps for the whole tower; 0: one block a step")
      ->capture_default_str();
  cmd->add_flag("--allow-image-urls", flags->allow_image_urls,
                "Fetch image parts' http(s) URLs (from public addresses only; off: they are refused by name)");
  cmd->add_option("--image-url-timeout", flags->image_url_timeout_s,
                  "Seconds a remote image URL's fetch may take in all (resolving, connecting, redirects, the body)")
      ->capture_default_str();
  cmd->add_option("--allow-image-urls-from-private", flags->image_urls_private,
                  "ADDRESS:PORT of a private image server that --allow-image-urls may reach too (repeatable); every "
                  "other private, loopback or link-local address stays refused");
  cmd->add_option("--responses-store-mib", flags->responses_store_mib,
                  "Memory for stored responses (/v1/responses with store: true), least recently used evicted first; "
                  "0 keeps none")
      ->capture_default_str();
  cmd->add_option("--responses-ttl", flags->responses_ttl_s, "Seconds a stored response is kept at most")
      ->capture_default_str();
  cmd->add_option("--queue-limit", flags->engine.queue_limit,
                  "Requests that may wait for a slot; more are refused with 429")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", flags->engine.prefill_chunk, "Prompt tokens per prefill piece (multiple of 64)")
      ->capture_default_str();
  cmd->add_option("--step-tokens", flags->engine.step_token_budget,
                  "Tokens a step carries: every decode row, then prompt pieces up to this (the oldest prompt's one "
                  "piece may pass it)")
      ->capture_default_str();
  cmd->add_option("--finishing-step-factor", flags->engine.finishing_step_factor,
                  "A step that finishes a prompt of N tokens carries no partial prompt pieces and other finishing "
                  "prompts only up to this many times N, so short prompts beside long ones wait about their own "
                  "prefill (0: off)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, "cpu, cuda, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--clef", flags->clef_dir,
                  "Runtime adapter folder (`duet adapter` writes it): decisions run through it with its joint head, "
                  "chat uses the base weights alone");
  cmd->add_option("--decision-limits", flags->decision_limits,
                  "Which /v1/systemone requests are taken: hosted (the hosted service's limits: 1-64 questions, ids "
                  "of 1-100 [A-Za-z0-9_.-], 2-255 options, 2-10 levels) or reference (what the protocol's reference "
                  "implementation takes: any ids, any counts from 1, within the token budget)")
      ->check(CLI::IsMember({"hosted", "reference"}))
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "CPU threads for the model (0: one per core)")->capture_default_str();
  cmd->add_option("--decision-workers", flags->engine.decision_workers,
                  "Threads running decisions' head work side by side (0: one per four cores, 2 to 8, at most "
                  "--parallel)")
      ->capture_default_str();
  add_draft_flags(*cmd, flags->draft);
  cmd->callback([flags] { serve(*flags); });
}

}  // namespace duet::cli
