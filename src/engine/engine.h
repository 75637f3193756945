#pragma once
// The engine: one thread runs steps of pieces over the model (continuous batching, chunked prefill); requests
// come in from any thread through submit() and get their events back through a RequestHandle. Between steps of decode
// rows alone, the next step may be launched before the last one's tokens are read (EngineOptions::lookahead), so that
// on a GPU the host's turn (reading tokens, stop checks, streaming, planning) overlaps the device's work.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"

namespace duet::model {
class Model;
class VisionModel;
}  // namespace duet::model
namespace duet::tokenizer {
class Tokenizer;
}

namespace duet::engine {

// Speculative decoding (engine/draft_verify.h): a decoding sequence's step verifies `tokens` drafted tokens as rows
// of its own, and keeps the ones its draws confirm, so its tokens are exactly those of plain decoding.
enum class DraftKind : uint8_t {
  none,
  mtp,     // the checkpoint's MTP layer drafts from the main model's final-norm rows (engine/mtp_drafter.h)
  ngram,   // prompt lookup: the continuation of the last n tokens' earlier occurrence (engine/ngram_drafter.h)
  oracle,  // benchmarks only: DraftOptions::test_oracle proposes (a known continuation at a set acceptance rate)
};
const char* to_string(DraftKind kind);
struct DraftOptions {
  DraftKind kind = DraftKind::none;
  int32_t tokens = 3;  // K, 1..4: drafted tokens per step (with `measured`, the most)
  // K chosen per step from measured costs and acceptance, 0..tokens (engine/draft_policy.h); else always `tokens`.
  bool measured = false;
  // Tests only: planted faults that the exactness tests must catch.
  bool test_accept_unchecked = false;   // every row's draw is taken, whether or not the draft before it was confirmed
  bool test_skip_rewind = false;        // the GDN state of rejected rows is left in place
  bool test_verify_as_prefill = false;  // verify rows computed as prefill rows (a GPU's prefill GEMM): other bits
  bool test_no_fold_rewinds = false;    // drafts stop before chunk ends, as on a backend that cannot rewind folds
  // DraftKind::oracle: up to `count` drafts for a request that generated `generated` so far.
  std::function<std::vector<int32_t>(const Request& request, std::span<const int32_t> generated, int32_t count)>
      test_oracle;
};

struct EngineOptions {
  int32_t parallel = 4;    // sequences decoded together (state pool slots)
  int32_t context = 4096;  // positions per sequence (prompt + completion)
  // Positions of K/V all sequences share, in pages of the model's kv_page_positions(); 0: parallel * context
  // (every slot can always hold a whole context). Less lets many short requests share what a few long ones need:
  // a request is admitted only when the pages it can ever need are free to reserve.
  int64_t kv_cache_tokens = 0;
  int32_t prefill_chunk = 256;  // prompts are cut only at multiples of this; a multiple of 64
  int32_t queue_limit = 64;     // requests waiting for a slot before submit() refuses with QueueFull
  // Tokens per step: every running sequence's decode token first, then prompt pieces in whole chunks (the
  // oldest prompt always gets at least one chunk, so it may be exceeded by that one chunk). 4,096 from the H200's
  // serving load (64 requests of 1,024-token prompts and 256-token replies, docs/benchmarks.md fourteenth round):
  // 1,024 / 2,048 / 4,096 / 8,192 gave 2,433 / 2,644 / 2,850 / 2,857 tok/s with a median time to first token of
  // 1,605 / 1,361 / 1,094 / 1,170 ms on a fresh server, 2,817 / 2,970 / 3,025 / 2,915 tok/s and 809 / 691 / 792 / 1,177
  // ms after it.
  int32_t step_token_budget = 4096;
  // A step in which a prompt finishes takes no other prompt's partial chunks, and other finishing prompts only within
  // this many times its tokens (Scheduler): a short prompt or decision beside long ones then waits for about its own
  // prefill instead of a whole budget of theirs (issue 17: decisions at 4 at once against alone). 0: off.
  int32_t finishing_step_factor = 4;
  size_t memory_limit_bytes = 0;  // the memory plan must fit in this; 0: the GPU's memory, or physical RAM
  // What decisions hold beyond the model's own state (set when the model has a joint head): the head's weights, and
  // per prompt position of a running decision its head memory row (the head's width in fp32). Host memory: the head
  // runs on the host.
  size_t decision_head_bytes = 0;
  size_t decision_bytes_per_position = 0;
  // Where the backend runs the head's products (CUDA): their memory there, counted in the GPU's plan (JointHead::
  // product_memory): the fp32 weights, and per position of the context the largest product's rows in and out.
  size_t decision_device_weight_bytes = 0;
  size_t decision_device_bytes_per_position = 0;
  // The prompt cache (engine/prompt_cache.h): GDN snapshots and KV pages kept for prompts that begin alike, within
  // this many bytes of the backend's memory, beside the state pool; 0 turns it off.
  size_t prompt_cache_bytes = 0;
  // Its host tier (engine/prompt_cache_host.h): entries the budget above lets go are copied into this many bytes of
  // host memory (pinned on a GPU) instead of dropped, and brought back when a prompt resumes from them; 0: none.
  size_t prompt_cache_host_bytes = 0;
  // The prompt cache's states at block ends inside a prompt's step are written by that step (backend::StepSnapshot)
  // where the backend can (StateStorage::snapshots_inside_steps), so a prompt is not cut there; false: cut there and
  // keep them from the slot, as on a backend that cannot (tests compare the two).
  bool prompt_cache_snapshots_in_steps = true;
  // Tests only (a planted fault): each snapshot inside a step is taken this many positions before the block end it
  // is kept for, so resumed prompts start from the wrong state and must differ from fresh ones.
  int32_t test_step_snapshot_shift = 0;
  // Tests only: the prompt cache's block hash (a planted collision); empty: the cache's own.
  std::function<uint64_t(uint64_t previous, std::span<const int32_t> block)> prompt_cache_block_hash;
  // Threads that run decisions' head work (engine/decision_workers.h), so that one decision's head never waits for
  // another's; 0: decision_worker_count()'s default.
  int32_t decision_workers = 0;
  // Test-only: step N (1-based) throws a DeviceError as a failed GPU call would; 0: never. `duet serve` sets it from
  // DUET_TEST_DEVICE_FAULT_STEP.
  int64_t test_device_fault_step = 0;
  DraftOptions draft;  // off unless asked (`--draft`)
  // Steps launched ahead (issue 16 item 5, the host never stalls the GPU): while the device runs step N, the engine
  // launches step N + 1 of the same decode rows, each reading its sequence's token from N's draw on the device, and
  // reads N's tokens, checks stops and streams them while N + 1 runs. Only between steps of plain decode rows (no
  // prompt to admit or prefill, no drafts, masks, decisions or forks), so nothing a request sees changes (its rows are
  // the same rows, drawn by the same settings at the same positions; a penalized row's token joins its slot's counts
  // on the device); a sequence that N ends by a stop wastes its row of N + 1. automatic: where the model's steps
  // overlap the host (Model::overlaps_steps: a GPU; engine.cc, kLookaheadWhereStepsOverlap, says what it gained
  // there). DUET_LOOKAHEAD = 0 or 1 in the environment sets never or always (measurements).
  enum class Lookahead : uint8_t { automatic, always, never };
  Lookahead lookahead = Lookahead::automatic;
  // Structured-output rows in steps launched ahead too, where the model holds a step's masks for later
  // (Model::masks_later: the CUDA backend's sampler waits for them on the device): the step's forward goes ahead and
  // each such row's mask is written once the step before is read and its token taken into the grammar; a row whose
  // grammar has not begun (grammar_after: a reasoning model's "</think>") gets every id unless that token began it.
  // On since the 44th round (docs/benchmarks.md: served under a JSON schema on an H100, 64 streams +7.9%, one stream
  // +1.8% greedy, +1.3% seeded; the same tokens); DUET_LOOKAHEAD_MASKED=0 or 1 in the environment sets it.
  bool lookahead_masked = true;
  // Test-only: a step launched ahead with its masks held has them written before the step before it is read, from
  // grammars one token behind: the planted fault the masked lookahead tests must catch.
  bool test_masks_before_tokens = false;
  // The vision tower that turns a request's images (Request::images) into the rows of its image tokens; null: requests
  // with images are refused (RequestInvalid "invalid_images"). Needs a model that reads_images().
  std::shared_ptr<const model::VisionModel> vision;
  // The tower's share of a step that has other pieces (engine/tower_runner.h), in whole tower stages, at least one a
  // step; 0: one stage a step. About a 256-token prefill chunk's time of the 9B on an H200 by default.
  double vision_step_ms = 30;
};

// The decision workers an engine starts: options.decision_workers when set; otherwise one per four cores, 2 to 8, and
// no more than options.parallel (no more decisions run at once). A few suffice: the heads' big loops share the global
// thread pool (every core) and take turns on it; what the workers add is that the rest of each head's work (and, on
// the CUDA backend, its products on the GPU) goes on beside the others.
int32_t decision_worker_count(const EngineOptions& options);

// Counters since start, for /metrics. requests_total counts accepted submits; every accepted request ends in
// exactly one of finished (stop or length), cancelled or failed (error). requests_refused counts QueueFull.
struct EngineStats {
  int64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0, requests_refused = 0;
  int64_t requests_failed = 0;
  int64_t prompt_tokens_total = 0, generated_tokens_total = 0;  // tokens run through prefill / sampled
  int32_t running = 0, waiting = 0, slots_total = 0, slots_free = 0;
  // KV pages: held by sequences now (total - free), and reserved for admitted requests' whole lengths.
  int64_t kv_pages_total = 0, kv_pages_free = 0, kv_pages_reserved = 0;
  // The prompt cache: admissions that resumed from it or found nothing, entries dropped for room, prompt tokens
  // resumed instead of prefilled, and the memory its entries hold now (snapshots and pages) of its budget.
  int64_t prompt_cache_hits = 0, prompt_cache_misses = 0, prompt_cache_evictions = 0;
  int64_t prompt_cache_tokens_total = 0;
  size_t prompt_cache_bytes_held = 0, prompt_cache_bytes = 0;
  // Its host tier: admissions resumed from an entry brought back from it (counted in prompt_cache_hits too), entries
  // dropped there for room, and the bytes its entries hold now of its budget.
  int64_t prompt_cache_host_hits = 0, prompt_cache_host_evictions = 0;
  size_t prompt_cache_host_bytes_held = 0, prompt_cache_host_bytes = 0;
  int64_t steps_total = 0;
  int64_t steps_ahead_total = 0;  // of them, launched ahead (EngineOptions::lookahead)
  double step_seconds_total = 0;
  double step_seconds_last = 0;
  double time_to_first_token_seconds_total = 0;  // over requests that produced a token
  // The vision tower: images it encoded (a prompt resumed past an image does not encode it) and the time it ran.
  int64_t vision_images_total = 0;
  double vision_seconds_total = 0;
  int64_t vision_stages_total = 0;  // tower stages run (model/vision_run.h)
  int64_t vision_steps_total = 0;   // steps that ran some
  // Structured outputs: token masks made (one per constrained draw) and the time spent making them.
  int64_t grammar_masks_total = 0;
  double grammar_mask_seconds_total = 0;
  // Speculative decoding: verify pieces run, and per draft position k (0-based, up to 4) the drafts verified there and
  // those accepted (a draft is verified when every draft before it in its step was accepted).
  int64_t verify_pieces_total = 0;
  std::array<int64_t, 4> drafts_verified{}, drafts_accepted{};
  std::array<int64_t, 5> draft_choices{};  // draftings by the K chosen for the next step, 0..4
  size_t weight_bytes = 0, state_pool_bytes = 0, workspace_bytes = 0, memory_limit_bytes = 0;
  // Set once a device error stopped the engine (DeviceError): every request since ends with it.
  std::string failure;
};

class Engine {
 public:
  // The tokenizer (may be null) is used for stop strings and token text; eos ids come from it and from the
  // model's config.json. Refuses (duet::Error) bad options and a memory plan (weights + parallel * fixed sequence
  // state + KV pages + workspace estimate) that exceeds memory_limit_bytes, before allocating the state pool up
  // front.
  Engine(model::Model& model, const tokenizer::Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // stops the engine thread; pending requests finish with FinishReason::cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Throws EngineFailed once a device error stopped the engine, QueueFull when queue_limit requests
  // already wait for a slot, and RequestInvalid with
  // code "invalid_prompt" (empty, ids out of range), "context_length_exceeded" (prompt + max_tokens >
  // context, or needs more KV pages than the whole cache) or "invalid_sampling" (a number out of range, stop
  // strings without a tokenizer). Admission is FIFO: the oldest waiting request goes first once a slot is free
  // and its pages can be reserved. Every request
  // it accepts gets exactly one FinishedEvent. A handle nobody holds any more (the consumer dropped it) is
  // cancelled at the next step.
  std::shared_ptr<RequestHandle> submit(Request request);
  // The n choices of one prompt (OpenAI's `n`): generate requests that differ only in their sampling, queued as n
  // submits in a row would be (all refused together when the queue cannot take them all). Each needs its own slot
  // and pages, but the prompt is prefilled once: a later choice admitted while the first still prefills waits, and
  // when the first's last chunk has run it starts from a fork of the first's state (BlockManager::fork: full pages
  // shared, the page still filling and the GDN state copied),
  // drawing its own first token from the same last row with its own settings and position. One admitted later
  // prefills itself. Either way its tokens are those it would get submitted alone (row invariance).
  std::vector<std::shared_ptr<RequestHandle>> submit_choices(std::vector<Request> requests);

  EngineStats stats() const;
  const EngineOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet::engine
