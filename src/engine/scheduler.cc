#include "engine/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

Scheduler::Scheduler(BlockManager& blocks, int32_t prefill_chunk, int32_t step_token_budget,
                     int32_t finishing_step_factor)
    : blocks_(blocks),
      prefill_chunk_(prefill_chunk),
      step_token_budget_(step_token_budget),
      finishing_step_factor_(finishing_step_factor) {}

int64_t Scheduler::pages_needed(const Sequence& sequence) const {
  return BlockManager::pages_for(static_cast<int64_t>(sequence.prompt_length()) + sequence.max_new_tokens());
}

bool Scheduler::try_admit(std::unique_ptr<Sequence>& sequence, std::span<const int32_t> shared) {
  const std::optional<int32_t> slot = blocks_.acquire(pages_needed(*sequence), shared);
  if (!slot) return false;
  sequence->set_slot(slot);
  running_.push_back(std::move(sequence));
  return true;
}

const Sequence* Scheduler::find(uint64_t id) const {
  for (const auto& sequence : running_)
    if (sequence->id() == id) return sequence.get();
  return nullptr;
}

namespace {
// A later choice waits while its first choice still prefills the prompt they share: the first's state is then copied
// instead of prefilling the prompt again. A first choice that finished (cancelled, failed) or already decodes
// (this choice was admitted too late) leaves it to prefill itself.
bool waits_for_fork(const Sequence& sequence, const Sequence* first) {
  return sequence.fork_of() && sequence.prefilled() == 0 && first != nullptr && !first->finished() &&
         !first->prefill_done();
}
}  // namespace

std::vector<Sequence*> Scheduler::waiting_forks_of(const Sequence& first) const {
  std::vector<Sequence*> forks;
  for (const auto& sequence : running_)
    if (!sequence->finished() && sequence->fork_of() == first.id() && sequence->prefilled() == 0)
      forks.push_back(sequence.get());
  return forks;
}

std::vector<ScheduledPiece> Scheduler::plan_step() {
  std::vector<ScheduledPiece> pieces;
  int32_t tokens = 0;
  for (const auto& sequence : running_) {
    if (sequence->finished() || !sequence->prefill_done() || sequence->decides()) continue;
    // With drafts, a verify piece: the last token and the drafts (engine/draft_verify.h).
    const std::span<const int32_t> verify = sequence->verify_tokens();
    pieces.push_back({.sequence = sequence.get(),
                      .tokens = verify.empty() ? std::span(sequence->generated()).last(1) : verify,
                      .is_prefill = false,
                      .samples = true});
    tokens += static_cast<int32_t>(pieces.back().tokens.size());
  }
  // Prompts waiting for prefill, in admission order.
  std::vector<Sequence*> waiting;
  for (const auto& sequence : running_) {
    if (sequence->finished() || sequence->prefill_done()) continue;
    if (sequence->fork_of() && waits_for_fork(*sequence, find(*sequence->fork_of()))) continue;
    if (sequence->waits_for_tower()) continue;
    waiting.push_back(sequence.get());
  }
  if (waiting.empty()) return pieces;
  auto remaining = [](const Sequence* s) { return s->prompt_length() - s->prefilled(); };
  // The oldest prompt always progresses: one chunk (or the rest of its prompt) is its own, even past the budget.
  Sequence* const oldest = waiting.front();
  const int32_t guaranteed = std::min(prefill_chunk_, remaining(oldest));
  tokens += guaranteed;
  // The rest of the budget goes to the prompts with the least left to prefill first (ties: the older first), so a
  // short prompt or decision is not queued behind the steps a long one needs.
  std::stable_sort(waiting.begin(), waiting.end(),
                   [&](const Sequence* a, const Sequence* b) { return remaining(a) < remaining(b); });
  // Once a piece finishes its prompt, the step is kept short for it (finishing_step_factor): later pieces join only
  // when they finish their prompts too, within that many times the first finisher's tokens; a long prompt's partial
  // chunks wait for a step where nothing finishes (the oldest keeps its one chunk). A short prompt or decision then
  // pays about its own prefill, not a full budget of a long neighbour's; equal prompts still share whole steps.
  int32_t finishing_limit = -1;  // the step's most prefill tokens, once a piece finishes its prompt
  int32_t prefill_tokens = guaranteed;
  for (Sequence* sequence : waiting) {
    const int32_t own = sequence == oldest ? guaranteed : 0;
    const int32_t left = remaining(sequence) - own;
    const int32_t room = std::max(step_token_budget_ - tokens, 0);
    // The rest of the prompt if it fits, else as many whole chunks as fit: prefilled() is always a multiple of 64
    // (of the chunk, or a cache point, or a cached prefix's end), so every cut lands on a multiple of 64.
    int32_t more = left <= room ? left : room / prefill_chunk_ * prefill_chunk_;
    if (finishing_limit >= 0 && (more < left || prefill_tokens + more > finishing_limit)) more = 0;
    int32_t length = own + more;
    if (length == 0) continue;
    // It takes the rest of its prompt, though a cache point below may end this piece early: the rest then follows
    // in the next step, itself a finishing one.
    const bool finishes = length == remaining(sequence);
    tokens += more;
    prefill_tokens += more;
    if (cuts_at_cache_points_)
      for (int32_t point : sequence->cache_points())  // ends at the next point, where its state is kept
        if (point > sequence->prefilled() && point < sequence->prefilled() + length) {
          length = point - sequence->prefilled();
          break;
        }
    if (finishing_limit < 0 && finishing_step_factor_ > 0 && finishes)
      finishing_limit =
          std::max(prefill_tokens, finishing_step_factor_ * (own + more) + (sequence == oldest ? 0 : guaranteed));
    pieces.push_back({.sequence = sequence,
                      .tokens = std::span(sequence->request().prompt).subspan(sequence->prefilled(), length),
                      .is_prefill = true,
                      .samples = length == remaining(sequence) && !sequence->decides()});
  }
  return pieces;
}

bool Scheduler::has_work() const {
  return std::any_of(running_.begin(), running_.end(), [](const std::unique_ptr<Sequence>& s) {
    return !s->finished() && !(s->decides() && s->prefill_done());
  });
}

bool Scheduler::has_pieces() const {
  return std::any_of(running_.begin(), running_.end(), [this](const std::unique_ptr<Sequence>& s) {
    if (s->finished() || (s->decides() && s->prefill_done()) || s->waits_for_tower()) return false;
    return !(s->fork_of() && waits_for_fork(*s, find(*s->fork_of())));
  });
}

Sequence* Scheduler::next_tower(std::optional<uint64_t> current) const {
  Sequence* oldest = nullptr;
  for (const auto& sequence : running_) {
    if (sequence->finished() || !sequence->waits_for_tower()) continue;
    if (sequence->fork_of() && waits_for_fork(*sequence, find(*sequence->fork_of()))) continue;
    if (current && sequence->id() == *current) return sequence.get();
    if (oldest == nullptr) oldest = sequence.get();
  }
  return oldest;
}

void Scheduler::release_finished() {
  // A decision whose rows were all taken keeps no state: its head runs on the decision workers from what its sink
  // kept, so its slot and KV pages go back now, not when the head ends (it stays here, without a slot, until then).
  for (const std::unique_ptr<Sequence>& sequence : running_)
    if (!sequence->finished() && sequence->decides() && sequence->prefill_done() && sequence->slot()) {
      blocks_.release(*sequence->slot());
      sequence->set_slot(std::nullopt);
    }
  std::erase_if(running_, [this](const std::unique_ptr<Sequence>& sequence) {
    if (!sequence->finished()) return false;
    if (sequence->slot()) blocks_.release(*sequence->slot());
    sequence->set_slot(std::nullopt);
    return true;
  });
}

}  // namespace duet::engine
