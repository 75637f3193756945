#pragma once
// Decides what each step runs. Every running sequence that has finished its prompt decodes one token every step, or
// verifies its drafted tokens as one piece (engine/draft_verify.h) (decode never waits behind prefill); then prompts
// are prefilled: the oldest waiting prompt gets one chunk every step, even past the budget, so every prompt
// progresses; the rest of the step's token budget goes to the prompts with the least left to prefill first (shortest
// remaining first, ties to the older), each taking as much as is left in whole multiples of prefill_chunk (or the rest
// of its prompt), so a short prompt or decision is not queued behind a long one's steps; and a step in which a prompt
// finishes takes no partial chunks beside it and other finishing prompts only within finishing_step_factor times
// its tokens, so that prompt's wait is about its own prefill, not a budget of its neighbours'. One piece per sequence
// per step, and a prompt is only ever cut at multiples of prefill_chunk, which the model's row invariance makes
// invisible in the results. A prompt whose images' rows are not made yet waits, unplanned, for its vision tower (run
// between steps by engine/tower_runner.h). Where the backend cannot keep a prompt's state inside a step
// (set_cuts_at_cache_points), a prompt is also cut at its prompt cache points (block ends, multiples of 64, where row
// invariance holds too), so that its state there can be kept; a decision too (where the backend can, its sink keeps
// the prefix of rows it took past that point, engine/step_snapshots.h). A decision is a prompt like any other (it
// shares steps, slots and the token budget with chat) that never decodes: it ends with its prefill.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace duet::engine {

struct ScheduledPiece {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;  // a prompt chunk or the last generated token
  bool is_prefill = false;
  bool samples = false;  // its last row's logits pick the next token (decode, or a generate prompt's last chunk)
};

class Scheduler {
 public:
  // finishing_step_factor 0: a finishing prompt's step is filled like any other.
  Scheduler(BlockManager& blocks, int32_t prefill_chunk, int32_t step_token_budget, int32_t finishing_step_factor = 4);

  // KV pages the sequence can ever hold: its prompt and every token it may generate.
  int64_t pages_needed(const Sequence& sequence) const;
  // Gives the sequence a state slot and reserves its pages, the first of them `shared` (a prompt cache hit); false
  // (and the sequence stays with the caller) when no slot is free or its pages cannot be reserved yet.
  bool try_admit(std::unique_ptr<Sequence>& sequence, std::span<const int32_t> shared = {});
  std::vector<ScheduledPiece> plan_step();
  // Whether prompts end their steps at their cache points (true until told the backend takes snapshots inside steps).
  void set_cuts_at_cache_points(bool cuts) { cuts_at_cache_points_ = cuts; }
  // The admitted choices waiting to be forked from `first` (Engine::submit_choices): not started, and admitted while
  // `first` still prefilled their shared prompt. plan_step gives them no prefill; the engine forks them when
  // `first`'s last chunk has run, or they prefill themselves once `first` is done or gone.
  std::vector<Sequence*> waiting_forks_of(const Sequence& first) const;
  // Frees the slots of finished sequences at once and drops them, and the slots of decisions that wait only for their
  // heads (they stay, slotless, until answered).
  void release_finished();

  bool idle() const { return running_.empty(); }
  // Whether a step would have anything to run: a running sequence that is not a decision waiting for its head.
  bool has_work() const;
  // Whether plan_step would plan a piece now: has_work() less the prompts that wait for their vision tower or for
  // the choice they fork from.
  bool has_pieces() const;
  // The prompt whose vision tower runs next (engine/tower_runner.h): `current` while it still waits for it, else the
  // oldest admitted prompt that does (not one waiting to be forked); null when none does.
  Sequence* next_tower(std::optional<uint64_t> current) const;
  std::span<const std::unique_ptr<Sequence>> running() const { return running_; }
  const Sequence* find(uint64_t id) const;

 private:
  BlockManager& blocks_;
  int32_t prefill_chunk_;
  int32_t step_token_budget_;
  int32_t finishing_step_factor_;
  bool cuts_at_cache_points_ = true;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
};

}  // namespace duet::engine
