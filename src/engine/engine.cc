#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "base/log.h"
#include "engine/block_manager.h"
#include "engine/counts_sync.h"
#include "engine/decision_workers.h"
#include "engine/draft_policy.h"
#include "engine/draft_verify.h"
#include "engine/image_prompt.h"
#include "engine/listener_notifier.h"
#include "engine/memory_plan.h"
#include "engine/mtp_drafter.h"
#include "engine/ngram_drafter.h"
#include "engine/prompt_cache.h"
#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_masks.h"
#include "engine/step_snapshots.h"
#include "engine/step_times.h"
#include "engine/tower_runner.h"
#include "model/model.h"
#include "model/vision_model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine {

namespace {

constexpr int32_t kMaxDecisionWorkers = 256;  // threads; more would only wait on the same cores

void check_options(const EngineOptions& options) {
  if (options.parallel < 1) fail("engine: parallel must be at least 1, got {}", options.parallel);
  if (options.context < 1) fail("engine: context must be at least 1, got {}", options.context);
  if (options.prefill_chunk < 64 || options.prefill_chunk % 64 != 0) {
    fail("engine: prefill_chunk must be a positive multiple of 64 (row invariance across cuts), got {}",
         options.prefill_chunk);
  }
  if (options.queue_limit < 0) fail("engine: queue_limit must not be negative, got {}", options.queue_limit);
  if (options.kv_cache_tokens < 0)
    fail("engine: kv_cache_tokens must not be negative, got {}", options.kv_cache_tokens);
  if (options.step_token_budget < 1) {
    fail("engine: step_token_budget must be at least 1, got {}", options.step_token_budget);
  }
  if (options.finishing_step_factor < 0)
    fail("engine: finishing_step_factor must not be negative, got {}", options.finishing_step_factor);
  if (options.decision_workers < 0 || options.decision_workers > kMaxDecisionWorkers)
    fail("engine: decision_workers must be 0 (from the cores) to {}, got {}", kMaxDecisionWorkers,
         options.decision_workers);
  if (options.draft.kind != DraftKind::none && (options.draft.tokens < 1 || options.draft.tokens > 4))
    fail("engine: draft tokens must be 1 to 4, got {}", options.draft.tokens);
}

// Drafting needs a backend that can take verify rows back, and for MTP drafts a model with an MTP layer: refused at
// start by name.
std::optional<MtpDrafter> checked_drafter(model::Model& model, backend::StateStorage& storage,
                                          const EngineOptions& options) {
  const DraftKind kind = options.draft.kind;
  if (kind == DraftKind::none) return std::nullopt;
  if (!storage.can_rewind())
    fail(
        "engine: --draft {} needs a backend that can take back verify rows; the {} backend cannot yet (draft with "
        "--backend cpu, or serve without --draft)",
        to_string(kind), storage.owner() != nullptr ? storage.owner()->name() : "model's");
  if (kind == DraftKind::oracle && !options.draft.test_oracle)
    fail("engine: the oracle drafter (benchmarks) needs DraftOptions::test_oracle");
  storage.prepare_rewind(verify_rows(options));
  if (kind != DraftKind::mtp) return std::nullopt;
  if (!model.has_mtp())
    fail(
        "engine: --draft mtp needs a model with an MTP layer (mtp.* tensors declared by mtp_num_hidden_layers); "
        "this one has none: use --draft ngram");
  return std::optional<MtpDrafter>(std::in_place, model, storage.pages());
}

// A vision tower needs a model that reads image rows (model/model.h), with the tower's image token and width.
void check_vision(const model::Model& model, const EngineOptions& options) {
  if (!options.vision) return;
  if (!model.reads_images())
    fail(
        "engine: a vision tower was given, but this model does not read images on its backend (no image token, or "
        "a backend that does not apply M-RoPE)");
  const model::VisionConfig& c = options.vision->config();
  if (c.image_token_id != model.config().image_token_id || c.out_hidden_size != model.config().hidden_size)
    fail("engine: the vision tower's image token {} and width {} are not the model's ({} and {})", c.image_token_id,
         c.out_hidden_size, model.config().image_token_id, model.config().hidden_size);
}

// What submit() checks a request's images against: the tower's, when there is one.
RequestLimits with_images(RequestLimits limits, const EngineOptions& options) {
  if (!options.vision) return limits;
  limits.image_token_id = static_cast<int32_t>(options.vision->config().image_token_id);
  limits.image_merge = static_cast<int32_t>(options.vision->config().spatial_merge_size);
  limits.image_patch_row = options.vision->patch_row_size();
  return limits;
}

// Checked before anything is allocated, so a plan that does not fit is refused with its numbers.
MemoryPlan checked_plan(const model::Model& model, const EngineOptions& options) {
  check_options(options);
  check_vision(model, options);
  const int64_t model_positions = model.config().max_position_embeddings;
  if (model_positions > 0 && options.context > model_positions) {
    fail("engine: context {} exceeds the model's max_position_embeddings {}", options.context, model_positions);
  }
  MemoryPlan plan = plan_memory(model, options);
  check_memory_plan(plan);
  log_info("engine: memory plan {}", plan.describe());
  return plan;
}

// eos from the tokenizer (tokenizer_config.json) and from the model's config.json.
std::vector<int32_t> eos_ids(const model::Model& model, const tokenizer::Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  if (tokenizer != nullptr && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  for (int64_t id : model.config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// While a decision waits for its head (no step of its own to run), the engine looks this often whether its client
// went away, so that a cancelled decision frees its slot without waiting for the head to end.
constexpr auto kHeadWaitPoll = std::chrono::milliseconds(20);

}  // namespace

const char* to_string(DraftKind kind) {
  switch (kind) {
    case DraftKind::none:
      return "none";
    case DraftKind::mtp:
      return "mtp";
    case DraftKind::ngram:
      return "ngram";
    case DraftKind::oracle:
      return "oracle";
  }
  return "?";
}

namespace {

// Whether `automatic` launches steps ahead where the model overlaps them (Model::overlaps_steps: the CUDA backend).
// Served on an H100 (docs/benchmarks.md, 41st round, tools/gpu_served_ab.sh, two rounds each): 64 streams +2.8%
// (5,459 -> 5,611 tok/s), one stream greedy +1.2%, seeded +0.2%; the GPU's idle time between steps 0.3% -> 0.0% at one
// row and 1.1-1.3% -> 0.0% at 64; exactness with it on 255 / 0 / 0, the device test and the suite passed. Its cost:
// a request that arrives while a step runs ahead waits one decode step longer (the served TTFT was no worse), and a
// sequence a step ends by a stop wastes its row of the step launched after. DUET_LOOKAHEAD=0 turns it off.
constexpr bool kLookaheadWhereStepsOverlap = true;

// EngineOptions::lookahead, unless DUET_LOOKAHEAD is 0 (never) or 1 (always) in the environment (measurements).
bool lookahead_on(const EngineOptions& options, const model::Model& model) {
  EngineOptions::Lookahead choice = options.lookahead;
  if (const char* v = std::getenv("DUET_LOOKAHEAD"); v != nullptr && std::string_view(v) == "0")
    choice = EngineOptions::Lookahead::never;
  else if (v != nullptr && std::string_view(v) == "1")
    choice = EngineOptions::Lookahead::always;
  return choice == EngineOptions::Lookahead::always ||
         (choice == EngineOptions::Lookahead::automatic && kLookaheadWhereStepsOverlap && model.overlaps_steps());
}

// EngineOptions::lookahead_masked, unless DUET_LOOKAHEAD_MASKED is 0 or 1 in the environment (measurements); only where
// the model can hold a step's masks (Model::masks_later).
bool lookahead_masked_on(const EngineOptions& options, const model::Model& model) {
  bool on = options.lookahead_masked;
  if (const char* v = std::getenv("DUET_LOOKAHEAD_MASKED"); v != nullptr && std::string_view(v) == "0")
    on = false;
  else if (v != nullptr && std::string_view(v) == "1")
    on = true;
  return on && model.masks_later();
}

}  // namespace

int32_t decision_worker_count(const EngineOptions& options) {
  if (options.decision_workers > 0) return options.decision_workers;
  const auto cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min(std::clamp(cores / 4, 2, 8), options.parallel));
}

struct Engine::Impl {
  Impl(model::Model& model, const tokenizer::Tokenizer* tokenizer, EngineOptions options)
      : model(model),
        tokenizer(tokenizer),
        options(options),
        plan(checked_plan(model, options)),
        limits(with_images({.vocab_size = static_cast<int32_t>(model.config().vocab_size),
                            .context = options.context,
                            .kv_pages = plan.kv_pages,
                            .kv_page_positions = plan.kv_page_positions,
                            .has_tokenizer = tokenizer != nullptr,
                            .has_adapter = model.has_adapter()},
                           options)),
        eos(eos_ids(model, tokenizer)),
        storage(model.new_state_storage(options.parallel, plan.kv_pages + plan.prompt_cache_pages,
                                        plan.prompt_cache_snapshots)),
        blocks(options.parallel, plan.kv_pages + plan.prompt_cache_pages),
        scheduler(blocks, options.prefill_chunk, options.step_token_budget, options.finishing_step_factor),
        counts_sync(options.parallel, static_cast<int32_t>(model.config().vocab_size)),
        mtp(checked_drafter(model, *storage, options)) {
    storage->prepare_counts(static_cast<int32_t>(model.config().vocab_size));  // counted in the plan
    if (options.draft.kind != DraftKind::none && options.draft.measured) draft_policy.emplace(options.draft.tokens);
    if (options.vision)
      tower.emplace(*options.vision, model.config().hidden_size, std::max(0.0, options.vision_step_ms) / 1e3);
    if (plan.prompt_cache_snapshots > 0)
      cache.emplace(blocks, *storage, static_cast<int32_t>(plan.prompt_cache_snapshots), plan.prompt_cache_pages,
                    options.prompt_cache_block_hash ? PromptCache::BlockHash(options.prompt_cache_block_hash)
                                                    : PromptCache::BlockHash(PromptCache::default_block_hash),
                    plan.prompt_cache_decision_bytes);
    if (cache && plan.prompt_cache_host_snapshots > 0) {
      // The MTP layer's K/V pages share the cache's page ids but live in the drafter's storage, which the host tier
      // does not copy: an entry brought back would resume drafts from pages another prompt wrote.
      if (options.draft.kind == DraftKind::mtp)
        fail(
            "engine: --prompt-cache-host-gib with --draft mtp: the host tier does not keep the MTP layer's K/V pages; "
            "leave --prompt-cache-host-gib at 0 or draft with ngram");
      host_tier = storage->new_host_tier(plan.prompt_cache_host_snapshots, plan.prompt_cache_host_pages);
      cache->add_host_tier(*host_tier);
    }
    scheduler.set_cuts_at_cache_points(!snapshots_in_steps());
    model.reserve_workspace(max_step_rows(options));  // steps allocate nothing
    stats.slots_total = stats.slots_free = blocks.slots();
    stats.kv_pages_total = blocks.pages();
    refresh_pool_stats_locked();
    stats.weight_bytes = plan.weight_bytes;
    stats.state_pool_bytes = plan.state_pool_bytes;
    stats.prompt_cache_bytes = plan.prompt_cache_bytes;
    stats.prompt_cache_host_bytes = plan.prompt_cache_host_bytes;
    stats.workspace_bytes = plan.workspace_bytes;
    stats.memory_limit_bytes = plan.limit_bytes;
    if (lookahead && options.draft.kind == DraftKind::none)
      log_info("engine: steps launched ahead between steps of decode rows alone{} (DUET_LOOKAHEAD=0 turns them off)",
               lookahead_masked ? ", structured-output rows among them (DUET_LOOKAHEAD_MASKED)" : "");
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    thread.join();
  }

  // A prompt with images: its positions and rope delta, made before the request waits (validate_request checked them).
  std::optional<ImagePrompt> image_prompt(const Request& request) const {
    if (!request.images || request.images->empty()) return std::nullopt;
    return ImagePrompt(request.prompt, *request.images, limits.image_token_id, limits.image_merge);
  }

  // Its images' keys for the prompt cache: digests of their pixel values, taken here on the caller's thread (not the
  // engine's), and only when there is a cache to key.
  std::vector<ImageCacheKey> image_keys(const Request& request) const {
    return cache && request.images ? image_cache_keys(*request.images) : std::vector<ImageCacheKey>{};
  }

  std::shared_ptr<RequestHandle> submit(Request request) {
    validate_request(request, limits);
    std::optional<ImagePrompt> images = image_prompt(request);
    std::vector<ImageCacheKey> keys = image_keys(request);
    auto handle = std::make_shared<RequestHandle>();
    {
      std::lock_guard lock(mutex);
      if (!stats.failure.empty()) throw EngineFailed(stats.failure);
      if (stopping) fail("engine: stopping, not taking requests");
      // Free slots not yet claimed by the engine thread count as room too: a request for a free slot never
      // waits in the queue, so queue_limit bounds only the requests that really wait.
      if (static_cast<int32_t>(waiting.size()) >= options.queue_limit + stats.slots_free) {
        ++stats.requests_refused;
        throw QueueFull(fmt::format("engine: {} requests already wait for a slot (queue_limit {}, parallel {})",
                                    waiting.size(), options.queue_limit, options.parallel));
      }
      ++stats.requests_total;
      waiting.push_back(std::make_unique<Sequence>(next_id++, std::move(request), handle, tokenizer));
      if (images) waiting.back()->set_images(std::move(*images));
      waiting.back()->set_image_cache_keys(std::move(keys));
    }
    wake.notify_all();
    return handle;
  }

  std::vector<std::shared_ptr<RequestHandle>> submit_choices(std::vector<Request> requests) {
    if (requests.empty()) fail("engine: submit_choices needs at least one request");
    for (const Request& request : requests) {
      validate_request(request, limits);
      if (request.kind != RequestKind::generate || request.adapter != requests[0].adapter ||
          request.prompt != requests[0].prompt)
        fail("engine: the choices of one request must be generate requests of one prompt");
    }
    const std::optional<ImagePrompt> images = image_prompt(requests[0]);
    const std::vector<ImageCacheKey> keys = image_keys(requests[0]);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    {
      std::lock_guard lock(mutex);
      if (!stats.failure.empty()) throw EngineFailed(stats.failure);
      if (stopping) fail("engine: stopping, not taking requests");
      const auto n = static_cast<int32_t>(requests.size());
      if (static_cast<int32_t>(waiting.size()) + n - 1 >= options.queue_limit + stats.slots_free) {
        ++stats.requests_refused;
        throw QueueFull(
            fmt::format("engine: {} requests already wait for a slot, {} choices do not fit (queue_limit "
                        "{}, parallel {})",
                        waiting.size(), n, options.queue_limit, options.parallel));
      }
      const uint64_t first = next_id;
      for (Request& request : requests) {
        handles.push_back(std::make_shared<RequestHandle>());
        ++stats.requests_total;
        auto sequence = std::make_unique<Sequence>(next_id++, std::move(request), handles.back(), tokenizer);
        if (sequence->id() != first) sequence->set_fork_of(first);
        if (images) sequence->set_images(*images);
        sequence->set_image_cache_keys(keys);
        waiting.push_back(std::move(sequence));
      }
    }
    wake.notify_all();
    return handles;
  }

  // Nothing thrown here can reach std::terminate: whatever a step throws fails that step's requests alone.
  void run() {
    for (;;) {
      try {
        {
          std::unique_lock lock(mutex);
          // Sleeps when there is nothing to run; a submit, an answer or the destructor wakes it (and the poll, while
          // decisions wait for their heads).
          const auto has_work = [this] {
            return stopping || !waiting.empty() || !decisions_done.empty() || scheduler.has_work();
          };
          if (awaiting_heads()) {
            wake.wait_for(lock, kHeadWaitPoll, has_work);
          } else {
            wake.wait(lock, has_work);
          }
          if (stopping) break;
          admit_waiting();
        }
        end_decided();
        step();
      } catch (const DeviceError& error) {
        fail_engine(error.what());
        break;
      } catch (...) {
        fail_step(describe(std::current_exception()));
      }
    }
    try {
      shut_down();
    } catch (...) {
      log_warn("engine: shutting down: {}", describe(std::current_exception()));
    }
  }

  static std::string describe(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }

  // The requests of the step that threw end with the error (their states may be half-written); sequences outside
  // the step and waiting requests go on.
  void fail_step(const std::string& message) noexcept {
    try {
      log_warn("engine: step failed: {}", message);
      for (Sequence* sequence : in_step) end(*sequence, FinishReason::error, message);
      in_step.clear();
      release_finished();
    } catch (...) {
      // Not even the error could be sent (out of memory): pause, and let the next step try again.
      in_step.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // A device error: nothing computed on the device can be trusted any more, so every request ends with the error,
  // running or waiting, and no step runs again (the engine thread ends; submit refuses with EngineFailed).
  void fail_engine(const std::string& what) noexcept {
    const std::string message = "the GPU failed and this server stops: " + what;
    log_error("engine: {}", message);
    {
      std::lock_guard lock(mutex);
      stats.failure = message;
    }
    for (auto& [id, job] : decision_jobs) job->cancelled = true;
    try {
      ahead.reset();  // its draws waited for (or their error ignored): nothing is written after this
      for (const auto& sequence : scheduler.running()) end(*sequence, FinishReason::error, message);
      in_step.clear();
      std::lock_guard lock(mutex);
      for (const auto& sequence : waiting) end_locked(*sequence, FinishReason::error, message);
      waiting.clear();
    } catch (...) {
      log_error("engine: ending the requests after the device error failed too");
    }
  }

  // Under the lock: drop cancelled waiters, then admit FIFO while a slot is free and the oldest waiter's pages can
  // be reserved. The oldest is never passed over for a shorter one behind it, so a long request cannot starve.
  void admit_waiting() {
    std::erase_if(waiting, [this](const std::unique_ptr<Sequence>& sequence) {
      if (!sequence->abandoned()) return false;
      end_locked(*sequence, FinishReason::cancelled, {});
      return true;
    });
    while (!waiting.empty() && blocks.free_slots() > 0) {
      Sequence* next = waiting.front().get();
      // A decision that waits for its head holds no slot but its sink's rows: the memory plan counts one sink per
      // slot, so no more decisions than slots are under way at once (chat may take a slot such a decision gave back).
      if (next->decides() && decisions_under_way() >= options.parallel) break;
      // A decision resumes (and is kept) only before its first span, where its sink keeps nothing but memory rows.
      const int64_t decision_limit = next->decides() ? next->request().decision->prefix_limit() : 0;
      // A prompt with images is resumed and kept with its images' digests (image_cache_key.h): the same token ids
      // with another image never resume its state.
      const bool cacheable = cache && (!next->decides() || decision_limit >= backend::kKvPagePositions);
      const auto look_up = [&] {
        return cacheable ? cache->lookup(cache_salt(*next), next->request().prompt, next->decides(),
                                         next->decides() ? decision_limit : INT64_MAX, next->image_cache_keys())
                         : std::nullopt;
      };
      std::optional<PromptCache::Hit> hit = look_up();
      const int64_t limit = scheduler.pages_needed(*next);
      // A host tier hit holds no device pages yet: it needs as many free pages as a miss (bring_back takes them).
      const auto shared = [&] { return hit ? static_cast<int64_t>(hit->pages.size()) : 0; };
      const auto fits = [&] { return blocks.can_acquire(limit, shared()); };
      // Pages only the cache holds come back, oldest entry first, when a request needs them; when running
      // sequences' promises are what is short, evicting would not help and the cache is left alone.
      if (cache && !fits()) {
        const int64_t short_by = limit - shared() - (blocks.free_pages() - blocks.reserved_pages());
        if (short_by <= cache->reclaimable_pages())
          while (!fits() && cache->evict_one()) hit = look_up();
      }
      // Brought back only for a request that fits now, so that its pages come from pages it could have taken anyway;
      // after that it is a device tier hit like any other (it still fits: the pages it took are the ones it shares).
      if (hit && hit->on_host()) hit = fits() ? cache->bring_back(*hit) : std::nullopt;
      if (!scheduler.try_admit(waiting.front(),
                               hit ? std::span<const int32_t>(hit->pages) : std::span<const int32_t>()))
        break;
      waiting.pop_front();
      start_state(*next, hit, cacheable);
    }
    refresh_pool_stats_locked();
  }

  // Whether a prompt's cached states inside a step come from the step itself (StepSnapshots) instead of cuts there.
  bool snapshots_in_steps() const {
    return cache && options.prompt_cache_snapshots_in_steps && storage->snapshots_inside_steps();
  }

  // What changes a prompt's rows besides its tokens: the adapter (this engine has one model). A decision's entries
  // hold its sink's prefix too, and only decisions resume from them.
  static uint64_t cache_salt(const Sequence& sequence) {
    return static_cast<uint64_t>(sequence.request().adapter) | (sequence.decides() ? uint64_t{1} << 32 : 0);
  }

  // A newly admitted sequence's state: a cache hit's snapshot (its shared pages are already in its table), or an
  // empty one; and the block ends where its own state will be kept: the end of its last full block, the block end
  // before its last token (so the same prompt sent again hits, leaving one token to prefill), and the block end at or
  // before its cache hint (where the conversation's next turn parts from it).
  void start_state(Sequence& sequence, const std::optional<PromptCache::Hit>& hit, bool cacheable) {
    const int32_t slot = *sequence.slot();
    if (hit) {
      storage->restore_snapshot(hit->snapshot, slot);
      if (sequence.decides()) sequence.request().decision->resume_from(hit->decision);
      sequence.resume_at(static_cast<int32_t>(hit->tokens()));
      // Its MTP rows there are the ones the pages got from the prompt that wrote them (engine/mtp_drafter.h).
      sequence.set_mtp_positions(sequence.prefilled());
    } else {
      storage->reset_slot(slot);  // a reused slot starts as empty as a fresh one (row invariance)
    }
    if (!cacheable) return;
    cache->note_admitted(hit);
    const int32_t length = sequence.prompt_length(), block = static_cast<int32_t>(backend::kKvPagePositions);
    std::vector<int32_t> points;
    if (sequence.decides()) {  // the last block end before its first span: the next decision about the same state
      const auto limit = static_cast<int32_t>(sequence.request().decision->prefix_limit() / block * block);
      if (limit > sequence.prefilled()) points.push_back(limit);
      sequence.set_cache_points(std::move(points));
      return;
    }
    std::vector<int32_t> candidates{(length - 1) / block * block, length / block * block};
    for (int32_t hint : sequence.request().cache_hints)
      candidates.push_back(std::clamp(hint, 0, length - 1) / block * block);
    std::sort(candidates.begin(), candidates.end());
    for (int32_t point : candidates)
      if (point > sequence.prefilled() && (points.empty() || points.back() < point)) points.push_back(point);
    sequence.set_cache_points(std::move(points));
  }

  void refresh_pool_stats_locked() {
    stats.slots_free = blocks.free_slots();
    stats.running = static_cast<int32_t>(scheduler.running().size());
    stats.kv_pages_free = blocks.free_pages();
    stats.kv_pages_reserved = blocks.reserved_pages();
    if (cache) {
      const PromptCache::Stats c = cache->stats();
      stats.prompt_cache_hits = c.hits;
      stats.prompt_cache_misses = c.misses;
      stats.prompt_cache_evictions = c.evictions;
      stats.prompt_cache_tokens_total = c.cached_tokens;
      stats.prompt_cache_bytes_held = static_cast<size_t>(c.entries) * model.sequence_fixed_bytes() +
                                      static_cast<size_t>(c.pages_held) * model.kv_page_bytes() + c.decision_bytes_held;
      stats.prompt_cache_host_hits = c.host_hits;
      stats.prompt_cache_host_evictions = c.host_evictions;
      stats.prompt_cache_host_bytes_held = static_cast<size_t>(c.host_snapshots_held) * model.sequence_fixed_bytes() +
                                           static_cast<size_t>(c.host_pages_held) * model.kv_page_bytes();
    }
  }

  // A step launched on the model (Model::launch) and not finished yet: the pieces, the settings their draws read
  // (the pieces point into them: it is made in place and never moved) and what finishing it needs.
  struct LaunchedStep {
    std::vector<ScheduledPiece> planned;  // a piece whose sequence ended meanwhile has a null sequence
    std::vector<model::Piece> pieces;
    // The backend samples next to the logits: each sampling piece goes with its settings.
    std::vector<backend::SampleSpec> specs;
    // The choices that start from a piece's sequence once its last prompt chunk has run (submit_choices), and their
    // own draws from that piece's last row.
    std::vector<std::vector<Sequence*>> forks;
    std::vector<std::vector<backend::SampleSpec>> fork_specs;
    std::vector<std::vector<const backend::SampleSpec*>> fork_spec_ptrs;
    // Structured outputs: each constrained sequence's mask for the token this step draws, forks' too, written by the
    // backend's call once the step's forward is on its way (engine/step_masks.h).
    StepMasks masks;
    bool masks_held = false;  // launched ahead with its masks held: release_held_masks writes them
    // Verify pieces (engine/draft_verify.h): every row's draw, the last one's in specs.
    std::vector<std::vector<backend::SampleSpec>> row_specs;
    std::vector<std::vector<const backend::SampleSpec*>> row_spec_ptrs;
    int64_t prompt_tokens = 0;
    // The cache points inside each prompt's piece, written by the step; given back if it fails.
    std::optional<StepSnapshots> snapshots;
    std::vector<int32_t> placeholders;  // a carried piece's token until the device reads its draw
    std::unique_ptr<model::Model::Launched> launched;
    Clock::time_point started;
  };

  void step() {
    step_times.entered();
    for (const auto& sequence : scheduler.running()) {
      if (sequence->abandoned()) end(*sequence, FinishReason::cancelled, {});
    }
    release_finished();
    if (run_tower()) release_finished();  // a prompt whose tower failed gives its slot back now
    // A step launched ahead while the last one ran is this step; otherwise plan one and launch it. Its masks are
    // released by now unless the last step failed before it could (fail_step ended every sequence of it: their writers
    // write every token, and nothing reads the rows).
    release_held_masks();
    std::unique_ptr<LaunchedStep> current = std::move(ahead);
    if (current != nullptr) step_times.forward();  // nothing to plan: it was launched in the last step()
    if (current == nullptr) {
      std::vector<ScheduledPiece> planned = scheduler.plan_step();
      if (planned.empty()) return;
      current = launch_step(std::move(planned));
      if (current == nullptr) return;  // refused: the piece named failed alone, the others run again next step
    }
    in_step.clear();
    for (const ScheduledPiece& piece : current->planned)
      if (piece.sequence != nullptr) in_step.push_back(piece.sequence);
    ahead = launch_ahead(*current);
    if (options.test_masks_before_tokens) release_held_masks();
    finish_step(*current);
    release_held_masks();
  }

  // The masks of the step launched ahead, written now that the step before it is read and its tokens are in the
  // grammars (its sequences that ended there were forgotten by release_finished: their writers write every token).
  void release_held_masks() {
    if (!ahead || !ahead->masks_held) return;
    ahead->masks_held = false;
    model.release_masks(*ahead->launched);
  }

  // EngineOptions::test_device_fault_step: the step of that number fails to launch as a device error would, whether it
  // was planned after the step before or launched ahead of its end.
  void inject_test_fault() {
    if (options.test_device_fault_step > 0 && ++steps_launched_for_faults == options.test_device_fault_step)
      throw DeviceError("CUDA: an injected device fault (DUET_TEST_DEVICE_FAULT_STEP)");
  }

  // The pieces of a planned step built, its counts sent and the step launched.
  std::unique_ptr<LaunchedStep> launch_step(std::vector<ScheduledPiece> planned_pieces) {
    auto launched_step = std::make_unique<LaunchedStep>();
    LaunchedStep& step = *launched_step;
    step.planned = std::move(planned_pieces);
    const std::vector<ScheduledPiece>& planned = step.planned;
    in_step.clear();
    for (const ScheduledPiece& piece : planned) in_step.push_back(piece.sequence);
    inject_test_fault();

    step.specs.resize(planned.size());
    step.forks.resize(planned.size());
    step.fork_specs.resize(planned.size());
    step.fork_spec_ptrs.resize(planned.size());
    step.row_specs.resize(planned.size());
    step.row_spec_ptrs.resize(planned.size());
    std::vector<model::Piece>& pieces = step.pieces;
    pieces.reserve(planned.size());
    std::vector<backend::CountsUpdate> counts_updates;  // the penalized sequences' tokens new since their last step
    if (snapshots_in_steps()) step.snapshots.emplace(*cache, planned.size(), options.test_step_snapshot_shift);
    for (size_t i = 0; i < planned.size(); ++i) {
      const ScheduledPiece& piece = planned[i];
      const int32_t slot = *piece.sequence->slot();
      const int64_t position = blocks.position(slot), end = position + static_cast<int64_t>(piece.tokens.size());
      model::RowOutput wants = piece.samples               ? model::RowOutput::sampled
                               : piece.sequence->decides() ? model::RowOutput::norm_rows
                                                           : model::RowOutput::none;
      if (runs_mtp(*piece.sequence, position)) wants = wants | model::RowOutput::norm_rows;
      const bool verifies = !piece.is_prefill && !piece.sequence->drafts().empty();
      blocks.cover(slot, end);  // within its reservation
      blocks.check_writable(slot, position, end);
      pieces.push_back({.slot = slot,
                        .page_table = blocks.table(slot),
                        .position = static_cast<int32_t>(position),
                        .tokens = piece.tokens,
                        .wants = wants,
                        .role = piece.is_prefill || (verifies && options.draft.test_verify_as_prefill)
                                    ? backend::RowRole::prefill
                                    : backend::RowRole::decode,
                        .rewindable = verifies,
                        .adapted = piece.sequence->request().adapter == AdapterUse::clef});
      if (piece.sequence->has_images()) {  // a prompt chunk's own positions and rows; every later row the delta
        const ImagePrompt& images = piece.sequence->images();
        const auto count = static_cast<int32_t>(piece.tokens.size());
        if (piece.is_prefill) {
          pieces.back().rope_positions = images.positions(static_cast<int32_t>(position), count);
          pieces.back().image_rows = images.rows(static_cast<int32_t>(position), count);
        } else {
          pieces.back().rope_delta = images.rope_delta();
        }
      }
      if (step.snapshots && piece.is_prefill)
        pieces.back().snapshots =
            step.snapshots->reserve(i, cache_salt(*piece.sequence), piece.sequence->request().prompt,
                                    piece.sequence->image_cache_keys(), piece.sequence->cache_points(), position, end,
                                    slot, piece.sequence->decides(), options.decision_bytes_per_position);
      if (piece.sequence->decides())  // a decision's rows may go where a device head reads them
        pieces.back().rows_to = piece.sequence->request().decision->device_rows();
      if (piece.samples && piece.is_prefill) step.forks[i] = scheduler.waiting_forks_of(*piece.sequence);
      if (piece.samples) {
        const Sequence& sequence = *piece.sequence;
        // The slot's penalty counts, brought up to date when this sequence or a choice forked from it reads them: a
        // fork's first draw is from this row, before it has a token of its own, so its counts are these.
        if (penalized(sequence.sampling()) || std::any_of(step.forks[i].begin(), step.forks[i].end(),
                                                          [](const Sequence* f) { return penalized(f->sampling()); }))
          counts_sync.sync(slot, sequence.id(), sequence.request().prompt, sequence.generated(), counts_updates);
        if (verifies) {
          step.row_specs[i] = verify_specs(sequence);
          step.specs[i] = std::move(step.row_specs[i].back());
          step.row_specs[i].pop_back();
          for (const backend::SampleSpec& spec : step.row_specs[i]) step.row_spec_ptrs[i].push_back(&spec);
          pieces.back().row_samples = step.row_spec_ptrs[i];
        } else {
          step.specs[i] = sample_spec(sequence.sampling(), slot, sequence.next_position());
          step.specs[i].mask_writer = mask_writer(step.masks, *piece.sequence);
        }
        pieces.back().sample = &step.specs[i];
        for (Sequence* fork : step.forks[i]) {
          step.fork_specs[i].push_back(sample_spec(fork->sampling(), slot, fork->next_position()));
          step.fork_specs[i].back().mask_writer = mask_writer(step.masks, *fork);
        }
        for (const backend::SampleSpec& spec : step.fork_specs[i]) step.fork_spec_ptrs[i].push_back(&spec);
        pieces.back().fork_samples = step.fork_spec_ptrs[i];
      }
      if (piece.is_prefill) step.prompt_tokens += static_cast<int64_t>(piece.tokens.size());
    }
    send_counts(counts_updates);
    step.started = Clock::now();
    step_times.forward();
    try {
      step.launched = model.launch(*storage, pieces);
    } catch (const model::PieceRefused& refused) {
      // Nothing moved: the piece the model named fails alone, the others run again next step.
      count_masks(step.masks);
      if (refused.piece() >= planned.size()) throw;
      log_warn("engine: step refused: {}", refused.what());
      end(*planned[refused.piece()].sequence, FinishReason::error, refused.what());
      in_step.clear();
      release_finished();
      return nullptr;
    }
    return launched_step;
  }

  // Steps launched ahead (EngineOptions::lookahead, issue 16 item 5): while the device runs `current`, the next step
  // of the same decode rows goes after it, each row's token read on the device from `current`'s draw of its sequence
  // (model::Piece::carried_from), so the device does not wait for the host to read the tokens, check stops and plan.
  // Only when nothing else would join or change the next step: no prompt that could be admitted, none prefilling, every
  // running sequence in `current` as a plain decode row (no drafts, forks, decisions or adapter; grammars only under
  // EngineOptions::lookahead_masked; after a prompt with images, its rope delta). A
  // penalized row's token joins its slot's penalty counts on the device (model::Piece::carried_from), and counts_sync
  // takes it as sent. A row with a grammar gets a held mask writer (StepMasks::add_held), run at release_held_masks
  // after `current` is finished, when whether its grammar holds for this token is known (grammar_after): the step's
  // forward goes to the device now, its sampler waits there for the masks.
  // A sequence whose draw in `current` is its last by length is left out; one that `current` ends otherwise (a stop)
  // wastes its row, which no one reads (its slot and pages are given back after the device has run it).
  std::unique_ptr<LaunchedStep> launch_ahead(const LaunchedStep& current) {
    if (!lookahead || options.draft.kind != DraftKind::none) return nullptr;
    {
      // A request that could be admitted now joins the next step, so none is launched ahead of it. One that waits for
      // a slot (every slot running) waits one step longer at most: a slot a stop frees is given out after the step
      // launched ahead has run.
      std::lock_guard lock(mutex);
      if (stopping || !decisions_done.empty() || (!waiting.empty() && blocks.free_slots() > 0)) return nullptr;
    }
    size_t running = 0;
    for (const auto& sequence : scheduler.running()) running += sequence->finished() ? 0 : 1;
    size_t plain = 0;
    auto launched_step = std::make_unique<LaunchedStep>();
    LaunchedStep& step = *launched_step;
    step.placeholders.assign(current.planned.size(), 0);
    step.specs.reserve(current.planned.size());
    for (size_t i = 0; i < current.planned.size(); ++i) {
      const ScheduledPiece& piece = current.planned[i];
      if (piece.sequence == nullptr) continue;
      Sequence& sequence = *piece.sequence;
      const model::Piece& was = current.pieces[i];
      if (piece.is_prefill || !piece.samples || piece.tokens.size() != 1 || !current.forks[i].empty() ||
          was.rewindable || was.adapted || has(was.wants, model::RowOutput::norm_rows) || sequence.decides() ||
          (sequence.request().grammar != nullptr && !lookahead_masked) || sequence.finished())
        return nullptr;
      if (penalized(sequence.sampling()) && !counts_sync.holds(*sequence.slot(), sequence.id()))
        return nullptr;  // `current` sent the slot's counts, so this holds; if not, the next step sends them
      ++plain;
      if (static_cast<int64_t>(sequence.generated().size()) + 1 >= sequence.sampling().max_tokens) continue;
      const int32_t slot = *sequence.slot();
      const int64_t position = blocks.position(slot) + 1;  // after `current`'s row, which is not advanced yet
      blocks.cover(slot, position + 1);
      blocks.check_writable(slot, position, position + 1);
      const std::span<const int32_t> token(&step.placeholders[i], 1);
      step.planned.push_back({.sequence = &sequence, .tokens = token, .is_prefill = false, .samples = true});
      step.specs.push_back(sample_spec(sequence.sampling(), slot, sequence.next_position() + 1));
      if (sequence.request().grammar != nullptr) {  // constrained, or maybe from this token on (grammar_after)
        step.specs.back().mask_writer = step.masks.add_held(sequence, stop_ids(sequence));
        step.masks_held = true;
      }
      step.pieces.push_back({.slot = slot,
                             .page_table = blocks.table(slot),
                             .position = static_cast<int32_t>(position),
                             .tokens = token,
                             .wants = model::RowOutput::sampled,
                             .role = backend::RowRole::decode,
                             .sample = &step.specs.back(),
                             .carried_from = static_cast<int32_t>(i)});
      if (sequence.has_images()) step.pieces.back().rope_delta = sequence.images().rope_delta();  // as launch_step's
    }
    if (plain != running || step.planned.empty()) return nullptr;
    const size_t n = step.planned.size();
    step.forks.resize(n);
    step.fork_specs.resize(n);
    step.fork_spec_ptrs.resize(n);
    step.row_specs.resize(n);
    step.row_spec_ptrs.resize(n);
    step.started = Clock::now();
    inject_test_fault();
    try {
      step.launched =
          step.masks_held ? model.launch_holding_masks(*storage, step.pieces) : model.launch(*storage, step.pieces);
    } catch (const model::PieceRefused& refused) {  // nothing moved: the next step is planned as usual
      log_warn("engine: a step launched ahead was refused: {}", refused.what());
      return nullptr;
    }
    for (const ScheduledPiece& piece : step.planned)
      if (penalized(piece.sequence->sampling())) counts_sync.carried(*piece.sequence->slot(), piece.sequence->id());
    std::lock_guard lock(mutex);
    ++stats.steps_ahead_total;
    return launched_step;
  }

  // A launched step's draws read and taken into its sequences.
  void finish_step(LaunchedStep& step) {
    const std::vector<ScheduledPiece>& planned = step.planned;
    const std::vector<model::Piece>& pieces = step.pieces;
    std::vector<model::PieceResult> results = model.collect(std::move(step.launched));
    count_masks(step.masks);
    if (results.size() != planned.size()) {
      fail("engine: model returned {} results for {} pieces", results.size(), planned.size());
    }
    step_times.returned();
    // A piece whose sequence ended after the step was launched ahead (its slot may be given back already): its row ran,
    // and nothing of it is read.
    const auto dropped = [&](size_t i) { return planned[i].sequence == nullptr; };
    // The events of the step's tokens, decisions and ends: announced from the notifier's thread when the step is done.
    const DeferredListeners deferred(notifier);
    for (size_t i = 0; i < pieces.size(); ++i)  // a verify piece advances by the rows it keeps, below
      if (!pieces[i].rewindable && !dropped(i))
        blocks.advance(pieces[i].slot, static_cast<int64_t>(pieces[i].tokens.size()));
    const std::vector<StepSnapshots::DecisionEntry> kept_decisions =
        step.snapshots ? step.snapshots->commit() : std::vector<StepSnapshots::DecisionEntry>{};

    for (size_t i = 0; i < planned.size(); ++i) {
      if (!planned[i].is_prefill || dropped(i)) continue;
      Sequence& sequence = *planned[i].sequence;
      if (sequence.decides()) {
        decide_chunk(sequence, static_cast<int32_t>(planned[i].tokens.size()), results[i], kept_decisions, i);
      } else {
        sequence.advance_prefill(static_cast<int32_t>(planned[i].tokens.size()));
        if (sequence.has_images() && sequence.prefill_done()) sequence.images().drop_rows();
        keep_in_cache(sequence);
      }
    }
    int64_t generated = 0;                      // the pieces whose last row picked a token, and below their forks
    std::vector<int32_t> kept(planned.size());  // rows each piece leaves in its sequence's state
    for (size_t i = 0; i < planned.size(); ++i) {
      kept[i] = static_cast<int32_t>(planned[i].tokens.size());
      if (!planned[i].samples || dropped(i)) continue;
      Sequence& sequence = *planned[i].sequence;
      if (pieces[i].rewindable) {
        kept[i] = take_verify_piece(sequence, pieces[i], results[i]);
        generated += kept[i];
        continue;
      }
      const SampledToken token = to_sampled_token(results[i].sampled, sequence.sampling());
      if (const std::optional<FinishReason> reason = sequence.accept(token, is_stop_token(sequence, token.id)))
        end(sequence, *reason, {});
      ++generated;
    }
    if (options.draft.kind != DraftKind::none) {
      note_draft_forward(planned, std::chrono::duration<double>(Clock::now() - step.started).count());
      draft_next(planned, pieces, results, kept);
    }
    // Before release_finished: a first choice that ended with its first token still holds the state to copy.
    for (size_t i = 0; i < planned.size(); ++i)
      if (!step.forks[i].empty()) generated += fork_choices(*planned[i].sequence, step.forks[i], results[i]);
    const double seconds = std::chrono::duration<double>(Clock::now() - step.started).count();
    in_step.clear();
    release_finished();
    std::lock_guard lock(mutex);
    refresh_pool_stats_locked();
    ++stats.steps_total;
    stats.step_seconds_total += seconds;
    stats.step_seconds_last = seconds;
    stats.prompt_tokens_total += step.prompt_tokens;
    stats.generated_tokens_total += generated;
    step_times.left(static_cast<int64_t>(planned.size()));
  }

  // A step's counts updates, before its forward reads them. A batch that fails leaves its slots' counts unknown: their
  // next sync starts over.
  void send_counts(std::span<const backend::CountsUpdate> updates) {
    if (updates.empty()) return;
    try {
      storage->update_counts(updates);
    } catch (...) {
      for (const backend::CountsUpdate& u : updates) counts_sync.forget(u.slot);
      throw;
    }
  }

  // `--draft mtp`: whether a piece of this sequence starting at `position` runs its MTP rows after the step (its
  // earlier positions all have theirs).
  // A prompt with images does not: the MTP layer rotates its rows at 1-D positions (mtp_forward), not at the 3-D
  // positions and rope delta its main rows take, so its drafts would be guesses; it decodes plainly instead (n-gram
  // drafts are verified by main-model rows, which take the delta).
  bool runs_mtp(const Sequence& sequence, int64_t position) const {
    return mtp && sequence.speculative() && !sequence.has_images() && sequence.mtp_positions() == position;
  }

  // The vision tower's share of this step (engine/tower_runner.h): stages of the tower of the next prompt that waits
  // for its rows, before the step plans, so a prompt whose rows are made now prefills in this step. On the engine
  // thread, like the steps: its host products never run beside a step's, and an image's rows depend on that image
  // alone (model/vision_tower.h), so no other request's bits change. A prompt whose tower fails ends alone; returns
  // whether one did.
  bool run_tower() {
    if (!tower) return false;
    Sequence* next = scheduler.next_tower(tower->current());
    if (next == nullptr) {
      tower->drop();  // its prompt ended
      return false;
    }
    TowerRunner::Progress progress;
    try {
      progress = tower->advance(*next, static_cast<int32_t>(blocks.position(*next->slot())), !scheduler.has_pieces());
    } catch (const std::exception& e) {
      end(*next, FinishReason::error, fmt::format("engine: the vision tower failed: {}", e.what()));
      return true;
    }
    std::lock_guard lock(mutex);
    stats.vision_images_total += progress.images;
    stats.vision_stages_total += progress.stages;
    stats.vision_seconds_total += progress.seconds;
    if (progress.stages > 0) ++stats.vision_steps_total;
    return false;
  }

  // A verify piece's draws taken into its sequence (engine/draft_verify.h); its rows past the last kept one are taken
  // back. Returns the rows kept, as many as the tokens taken.
  int32_t take_verify_piece(Sequence& sequence, const model::Piece& piece, const model::PieceResult& result) {
    const std::vector<int32_t> drafts(sequence.drafts().begin(), sequence.drafts().end());
    std::vector<SampledToken> draws;
    for (const backend::SampledRow& row : result.row_sampled)
      draws.push_back(to_sampled_token(row, sequence.sampling()));
    draws.push_back(to_sampled_token(result.sampled, sequence.sampling()));
    const Verified v = take_verified(
        sequence, drafts, draws, [&](int32_t id) { return is_stop_token(sequence, id); },
        options.draft.test_accept_unchecked);
    blocks.advance(piece.slot, v.kept);
    if (draft_policy) draft_policy->note_verified(v.compared, v.accepted);
    if (!v.reason && v.kept < static_cast<int32_t>(piece.tokens.size()) && !options.draft.test_skip_rewind)
      storage->rewind(piece.slot, piece.position + v.kept);
    if (v.reason) end(sequence, *v.reason, {});
    std::lock_guard lock(mutex);
    ++stats.verify_pieces_total;
    for (int32_t k = 0; k < v.compared && k < 4; ++k) ++stats.drafts_verified[static_cast<size_t>(k)];
    for (int32_t k = 0; k < v.accepted && k < 4; ++k) ++stats.drafts_accepted[static_cast<size_t>(k)];
    return v.kept;
  }

  // Drafts for every sequence of the step that decodes next: prompt lookup, or the MTP rows of the positions the step
  // kept (prompt chunks too) and the drafts after the last of them. A sequence without drafts decodes plainly.
  void draft_next(const std::vector<ScheduledPiece>& planned, const std::vector<model::Piece>& pieces,
                  const std::vector<model::PieceResult>& results, const std::vector<int32_t>& kept) {
    const auto started = Clock::now();
    // K for the step after this one: the options' own, or the policy's choice for the sequences that will decode.
    const auto decoding = static_cast<int32_t>(std::count_if(planned.begin(), planned.end(), [](const auto& p) {
      return !p.sequence->decides() && !p.sequence->finished() && p.sequence->prefill_done();
    }));
    drafted_k = draft_policy ? draft_policy->choose(decoding) : options.draft.tokens;
    std::vector<MtpDrafter::Rows> rows;
    std::vector<Sequence*> of;
    for (size_t i = 0; i < planned.size(); ++i) {
      Sequence& sequence = *planned[i].sequence;
      if (sequence.decides()) continue;
      sequence.set_drafts({});
      if (sequence.finished() || !sequence.speculative()) continue;
      const int64_t next = blocks.position(*sequence.slot());  // the next verify piece's first row
      const int32_t count =
          sequence.prefill_done() ? fold_safe_drafts(next, std::min(draft_count(sequence), drafted_k)) : 0;
      if (!mtp) {
        if (count > 0) sequence.set_drafts(lookup_drafts(sequence, count));
        continue;
      }
      const int64_t start = pieces[i].position;
      if (!runs_mtp(sequence, start) || results[i].norm_rows.empty()) continue;
      MtpDrafter::Rows r;
      r.position = static_cast<int32_t>(start);
      r.hidden = std::span(results[i].norm_rows).first(static_cast<size_t>(kept[i] * hidden));
      r.drafts = count;
      for (int64_t j = start + 1; j <= start + kept[i]; ++j) r.tokens.push_back(token_at(sequence, j));
      blocks.cover(*sequence.slot(), start + kept[i] + count);  // the draft rows' K/V, within the reservation
      sequence.set_mtp_positions(start + kept[i]);
      rows.push_back(std::move(r));
      of.push_back(&sequence);
    }
    if (!rows.empty()) {
      for (size_t n = 0; n < rows.size(); ++n) rows[n].page_table = blocks.table(*of[n]->slot());  // covered above
      const std::vector<std::vector<int32_t>> drafts = mtp->run(rows);
      for (size_t n = 0; n < rows.size(); ++n) of[n]->set_drafts(drafts[n]);
    }
    if (decoding == 0) return;
    if (draft_policy)
      draft_policy->note_drafting(decoding, drafted_k, std::chrono::duration<double>(Clock::now() - started).count());
    std::lock_guard lock(mutex);
    ++stats.draft_choices[static_cast<size_t>(drafted_k)];
  }

  // `--draft-tokens` measured (engine/draft_policy.h): the forward of a step whose sequences all decode, verifying the
  // K the last drafting chose, from its start to its draws taken. A step with prompt rows tells nothing of that K.
  void note_draft_forward(const std::vector<ScheduledPiece>& planned, double seconds) {
    if (!draft_policy || std::any_of(planned.begin(), planned.end(), [](const auto& p) { return p.is_prefill; }))
      return;
    draft_policy->note_forward(static_cast<int32_t>(planned.size()), drafted_k, seconds);
  }

  // Drafts that need no model: prompt lookup, or the benchmarks' oracle.
  std::vector<int32_t> lookup_drafts(const Sequence& sequence, int32_t count) const {
    if (options.draft.kind == DraftKind::oracle) {
      std::vector<int32_t> drafts = options.draft.test_oracle(sequence.request(), sequence.generated(), count);
      drafts.resize(std::min(drafts.size(), static_cast<size_t>(count)));
      return drafts;
    }
    std::vector<int32_t> text = sequence.request().prompt;
    text.insert(text.end(), sequence.generated().begin(), sequence.generated().end());
    return ngram_drafts(text, count);
  }

  // Drafts the next step may verify: never a row that would sample past max_tokens.
  int32_t draft_count(const Sequence& sequence) const {
    const auto left = sequence.sampling().max_tokens - static_cast<int32_t>(sequence.generated().size());
    return std::clamp(left - 1, 0, options.draft.tokens);
  }

  // A backend that cannot take back a chunk's fold (StateStorage::can_rewind_folds) gets no verify piece whose row
  // t >= 1 completes a chunk: with its first row at `next`, the row completing the chunk is row 63 - next % 64, so
  // the drafts stop before it (row 0 is the last token, always kept, so a fold there is never taken back).
  int32_t fold_safe_drafts(int64_t next, int32_t count) const {
    const auto fold_row = static_cast<int32_t>(backend::kKvPagePositions - 1 - next % backend::kKvPagePositions);
    if ((storage->can_rewind_folds() && !options.draft.test_no_fold_rewinds) || fold_row == 0) return count;
    return std::min(count, fold_row - 1);
  }

  static int32_t token_at(const Sequence& sequence, int64_t position) {
    const int64_t length = sequence.prompt_length();
    return position < length ? sequence.request().prompt[static_cast<size_t>(position)]
                             : sequence.generated()[static_cast<size_t>(position - length)];
  }

  // A prompt that just reached one of its cache points leaves its state there to the prompt cache: everything so far
  // was computed as prefill rows.
  void keep_in_cache(const Sequence& sequence) {
    const std::vector<int32_t>& points = sequence.cache_points();
    if (!cache || std::find(points.begin(), points.end(), sequence.prefilled()) == points.end()) return;
    cache->insert(cache_salt(sequence), std::span(sequence.request().prompt).first(sequence.prefilled()),
                  *sequence.slot(), nullptr, 0, sequence.image_cache_keys());
  }

  // The choices waiting for `first`'s prefill start from a copy of its state, each with its own first token drawn
  // from `first`'s last row by its own settings (PieceResult::fork_sampled), as if it had prefilled the prompt itself.
  // Returns the tokens drawn.
  int64_t fork_choices(const Sequence& first, const std::vector<Sequence*>& forks, const model::PieceResult& result) {
    if (result.fork_sampled.size() != forks.size())
      fail("engine: the model returned {} draws for {} forked choices", result.fork_sampled.size(), forks.size());
    int64_t drawn = 0;
    for (size_t k = 0; k < forks.size(); ++k) {
      Sequence& fork = *forks[k];
      SampledToken token;
      try {
        // Full pages shared, the page `first` still fills copied, and the GDN state copied.
        for (const auto& [from, to] : blocks.fork(*first.slot(), *fork.slot())) {
          storage->copy_pages(std::span(&from, 1), std::span(&to, 1));
          if (mtp) mtp->storage().copy_pages(std::span(&from, 1), std::span(&to, 1));
        }
        storage->copy_slot(*first.slot(), *fork.slot());
        // The MTP row of the prompt's last position is the first choice's (its first token's): only acceptance, never
        // a token, depends on it.
        fork.set_mtp_positions(first.mtp_positions());
        token = to_sampled_token(result.fork_sampled[k], fork.sampling());
      } catch (const std::exception& e) {  // this choice alone fails
        end(fork, FinishReason::error, e.what());
        continue;
      }
      fork.advance_prefill(fork.prompt_length());
      ++drawn;
      if (const std::optional<FinishReason> reason = fork.accept(token, is_stop_token(fork, token.id)))
        end(fork, *reason, {});
    }
    return drawn;
  }

  // A decision's chunk: its rows go to its sink on the decision workers (under the decision's id, so its tasks run in
  // order; a sink on the device took them during the step instead), and after the last chunk a worker runs the head and
  // hands the answer back (end_decided), so the engine steps on meanwhile. A failing sink fails its own decision only.
  // A decision that ends before its answer (cancelled, failed, shut down) marks its job cancelled: its tasks not yet
  // started are skipped, and an answer computed meanwhile is dropped.
  struct DecisionJob {
    std::shared_ptr<DecisionSink> sink;
    std::string error;                   // the first failure (its tasks run one at a time)
    std::atomic<bool> cancelled{false};  // set by the engine thread when the decision leaves the scheduler
  };
  struct DecisionDone {
    uint64_t id;
    std::vector<float> logits;
    std::string error;
    double prefill_s = 0, head_s = 0;  // FinishedEvent::decision_prefill_s, decision_head_s
  };

  // `kept`: the step's decision entries made inside its rows (StepSnapshots::commit), this one's are piece `piece`'s.
  void decide_chunk(Sequence& sequence, int32_t count, model::PieceResult& result,
                    std::span<const StepSnapshots::DecisionEntry> kept, size_t piece) {
    // A sink that reads its rows on the device took them during the step (Piece::rows_to): no host rows to pass on.
    const bool on_device = sequence.request().decision->device_rows() != nullptr;
    if (!on_device && result.norm_rows.size() != static_cast<size_t>(count) * static_cast<size_t>(hidden)) {
      end(sequence, FinishReason::error,
          fmt::format("engine: the model returned {} final-norm values for {} rows of {}", result.norm_rows.size(),
                      count, hidden));
      return;
    }
    auto& job = decision_jobs[sequence.id()];
    if (!job) {
      job = std::make_shared<DecisionJob>();
      job->sink = sequence.request().decision;
    }
    const int64_t first = sequence.prefilled();
    if (!on_device)
      decision_workers.post(sequence.id(), [job, first, count, rows = std::move(result.norm_rows)] {
        if (job->cancelled || !job->error.empty()) return;
        try {
          job->sink->add_rows(first, count, rows);
        } catch (const std::exception& e) {
          job->error = e.what();
        }
      });
    result.norm_rows = {};
    sequence.advance_prefill(count);
    keep_decision_in_cache(sequence);
    for (const StepSnapshots::DecisionEntry& entry : kept)  // cache points inside this step's rows, before the head
      if (entry.piece == piece) keep_decision_prefix(sequence, entry.pending, entry.positions);
    if (!sequence.prefill_done()) return;
    const auto prefilled_at = std::chrono::steady_clock::now();
    decision_workers.post(
        sequence.id(), [this, job, id = sequence.id(), prefilled_at, prefill_s = sequence.seconds_since_submitted()] {
          if (job->cancelled) return;  // nobody waits for this answer
          DecisionDone done{id, {}, job->error, prefill_s};
          if (done.error.empty()) {
            try {
              done.logits = job->sink->finish();
            } catch (const std::exception& e) {
              done.error = e.what();
            }
          }
          done.head_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - prefilled_at).count();
          {
            std::lock_guard lock(mutex);
            decisions_done.push_back(std::move(done));
          }
          wake.notify_all();
        });
  }

  // A decision that just reached its cache point leaves its backbone state there to the prompt cache, with what its
  // sink keeps of the prefix: a decision worker sets that after the sink's rows up to there (its tasks run in order).
  void keep_decision_in_cache(const Sequence& sequence) {
    const std::vector<int32_t>& points = sequence.cache_points();
    const int32_t positions = sequence.prefilled();
    if (!cache || std::find(points.begin(), points.end(), positions) == points.end()) return;
    auto pending = std::make_shared<PendingDecisionPrefix>();
    if (!cache->insert(cache_salt(sequence), std::span(sequence.request().prompt).first(positions), *sequence.slot(),
                       pending, static_cast<size_t>(positions) * options.decision_bytes_per_position))
      return;
    keep_decision_prefix(sequence, std::move(pending), positions);
  }
  // The sink's prefix of `positions` into a cache entry's `pending`, once a decision worker has the rows up to there.
  void keep_decision_prefix(const Sequence& sequence, std::shared_ptr<PendingDecisionPrefix> pending,
                            int64_t positions) {
    const auto found = decision_jobs.find(sequence.id());
    if (found == decision_jobs.end() || !found->second) return;  // the decision ended with an error
    decision_workers.post(sequence.id(), [job = found->second, pending, positions] {
      if (job->cancelled || !job->error.empty()) return;
      try {
        pending->set(job->sink->keep_prefix(positions));
      } catch (const std::exception& e) {  // the next decision prefills the state itself
        log_warn("engine: a decision's prefix was not kept: {}", e.what());
      }
    });
  }

  // Running decisions, prefilling or waiting for their heads.
  int32_t decisions_under_way() const {
    const auto running = scheduler.running();
    return static_cast<int32_t>(
        std::count_if(running.begin(), running.end(), [](const auto& s) { return s->decides() && !s->finished(); }));
  }

  // Engine thread: whether a running decision has had all its rows and waits for its head's answer.
  bool awaiting_heads() const {
    const auto running = scheduler.running();
    return std::any_of(running.begin(), running.end(),
                       [](const auto& s) { return s->decides() && s->prefill_done() && !s->finished(); });
  }

  // The answers the decision workers finished: each ends its decision, if it is still running.
  void end_decided() {
    std::vector<DecisionDone> done;
    {
      std::lock_guard lock(mutex);
      done.swap(decisions_done);
    }
    if (done.empty()) return;
    for (DecisionDone& d : done)
      for (const auto& sequence : scheduler.running()) {
        if (sequence->id() != d.id || sequence->finished()) continue;
        if (d.error.empty()) {
          sequence->set_decision_times(d.prefill_s, d.head_s);
          end(*sequence, FinishReason::stop, {}, std::move(d.logits));
        } else {
          log_warn("engine: decision {} failed: {}", d.id, d.error);
          end(*sequence, FinishReason::error, d.error);
        }
      }
    release_finished();
  }

  // A constrained sequence's writer of this step's mask (its end ids allowed where the grammar may end); nullptr for
  // the others, without building their end ids.
  backend::MaskWriter* mask_writer(StepMasks& masks, Sequence& sequence) const {
    return sequence.constrained() ? masks.add(sequence, stop_ids(sequence)) : nullptr;
  }

  // The sequence's stop tokens (what may end a complete document): eos unless ignore_eos, and stop_token_ids.
  std::vector<int32_t> stop_ids(const Sequence& sequence) const {
    const SamplingParams& sampling = sequence.sampling();
    std::vector<int32_t> ids = sampling.stop_token_ids;
    if (!sampling.ignore_eos) ids.insert(ids.end(), eos.begin(), eos.end());
    return ids;
  }

  void count_masks(const StepMasks& masks) {
    if (masks.written() == 0) return;
    std::lock_guard lock(mutex);
    stats.grammar_masks_total += masks.written();
    stats.grammar_mask_seconds_total += masks.seconds();
  }

  bool is_stop_token(const Sequence& sequence, int32_t id) const {
    const SamplingParams& sampling = sequence.sampling();
    if (!sampling.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) return true;
    return std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(), id) !=
           sampling.stop_token_ids.end();
  }

  void release_finished() {
    // The step launched ahead forgets the sequences that ended before it is finished: they are about to go.
    if (ahead)
      for (ScheduledPiece& piece : ahead->planned)
        if (piece.sequence != nullptr && piece.sequence->finished()) {
          ahead->masks.forget(*piece.sequence);  // its writer, if its masks are still held, must not read it
          piece.sequence = nullptr;
        }
    scheduler.release_finished();
    // A decision that left the scheduler (answered, cancelled, failed) drops its job; whatever of its work is still
    // queued on the workers is skipped.
    std::erase_if(decision_jobs, [this](const auto& entry) {
      const auto running = scheduler.running();
      if (std::any_of(running.begin(), running.end(), [&](const auto& s) { return s->id() == entry.first; }))
        return false;
      entry.second->cancelled = true;
      return true;
    });
    std::lock_guard lock(mutex);
    refresh_pool_stats_locked();
  }

  // Sends the sequence's FinishedEvent and counts it; its slot is freed by the next release_finished().
  void end(Sequence& sequence, FinishReason reason, const std::string& error, std::vector<float> decision_logits = {}) {
    std::lock_guard lock(mutex);
    end_locked(sequence, reason, error, std::move(decision_logits));
  }

  void end_locked(Sequence& sequence, FinishReason reason, const std::string& error,
                  std::vector<float> decision_logits = {}) {
    if (sequence.finished()) return;
    sequence.finish(reason, error, std::move(decision_logits));
    switch (reason) {
      case FinishReason::stop:
      case FinishReason::length:
        ++stats.requests_finished;
        break;
      case FinishReason::cancelled:
        ++stats.requests_cancelled;
        break;
      case FinishReason::error:
        ++stats.requests_failed;
        break;
    }
    if (!sequence.generated().empty()) stats.time_to_first_token_seconds_total += sequence.time_to_first_token_s();
  }

  // The destructor's end: everything still running or waiting finishes as cancelled.
  void shut_down() {
    ahead.reset();  // a step launched ahead: its draws are waited for and dropped
    // First, so that no head work starts once a client has heard that its decision ended.
    for (auto& [id, job] : decision_jobs) job->cancelled = true;
    for (const auto& sequence : scheduler.running()) end(*sequence, FinishReason::cancelled, {});
    release_finished();
    std::lock_guard lock(mutex);
    for (const auto& sequence : waiting) end_locked(*sequence, FinishReason::cancelled, {});
    waiting.clear();
  }

  model::Model& model;
  const tokenizer::Tokenizer* tokenizer;
  const EngineOptions options;
  const MemoryPlan plan;
  const RequestLimits limits;
  const std::vector<int32_t> eos;
  // The width of the final-norm rows a decision's sink gets.
  const int64_t hidden = model.config().hidden_size;
  // Engine thread only: the memory of every sequence's state, its one bookkeeper, and the prompt cache over both.
  std::unique_ptr<backend::StateStorage> storage;
  BlockManager blocks;
  std::unique_ptr<backend::HostStateTier> host_tier;  // the prompt cache's second tier, when planned; outlives `cache`
  std::optional<PromptCache> cache;                   // when the plan gives it room
  Scheduler scheduler;                                // engine thread only
  std::optional<TowerRunner> tower;                   // engine thread only; with options.vision
  std::vector<Sequence*> in_step;  // engine thread only: the sequences of the step being run, failed if it throws
  // Engine thread only: the steps that have gone to launch, counted for EngineOptions::test_device_fault_step.
  int64_t steps_launched_for_faults = 0;
  // Engine thread only: launch_ahead's step, launched while the one before it ran; the next step() finishes it.
  std::unique_ptr<LaunchedStep> ahead;
  const bool lookahead = lookahead_on(options, model);
  const bool lookahead_masked = lookahead && lookahead_masked_on(options, model);
  CountsSync counts_sync;         // engine thread only: what the storage's penalty counts hold
  std::optional<MtpDrafter> mtp;  // `--draft mtp` (engine thread only)
  // Engine thread only: with DraftOptions::measured, K per step from measured costs; the K the last drafting chose.
  std::optional<DraftPolicy> draft_policy;
  int32_t drafted_k = 0;
  // Engine thread only: announces the events of a step's tokens to their listeners from its own thread
  // (listener_notifier.h). Joined after the engine thread (in ~Impl), announcing what it still holds.
  ListenerNotifier notifier;
  StepTimes step_times;  // engine thread only: DUET_STEP_GAPS=1

  mutable std::mutex mutex;  // guards everything below
  std::condition_variable wake;
  std::deque<std::unique_ptr<Sequence>> waiting;
  EngineStats stats;
  uint64_t next_id = 0;
  bool stopping = false;
  std::vector<DecisionDone> decisions_done;  // answers from the decision workers, not yet ended

  // Engine thread only: the decisions whose chunks went to the workers, by sequence id, until they leave the
  // scheduler.
  std::unordered_map<uint64_t, std::shared_ptr<DecisionJob>> decision_jobs;
  // Destroyed before the members above (a task running then may still hand back an answer), after the engine thread;
  // shut_down() has marked every job cancelled by then, so only tasks already running are waited for.
  DecisionWorkers decision_workers{static_cast<size_t>(decision_worker_count(options))};
  std::thread thread;  // last: started once everything above exists
};

Engine::Engine(model::Model& model, const tokenizer::Tokenizer* tokenizer, EngineOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, options)) {}

Engine::~Engine() = default;

std::shared_ptr<RequestHandle> Engine::submit(Request request) { return impl_->submit(std::move(request)); }

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_choices(std::vector<Request> requests) {
  return impl_->submit_choices(std::move(requests));
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mutex);
  EngineStats out = impl_->stats;
  out.waiting = static_cast<int32_t>(impl_->waiting.size());
  return out;
}

const EngineOptions& Engine::options() const { return impl_->options; }

}  // namespace duet::engine
