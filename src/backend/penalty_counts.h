#pragma once
// The token counts the penalties read (issue 16 item 5), kept per sequence slot in the backend's state storage and
// updated there a few ids a step, instead of a table of every id seen copied into every step's sampling settings (which
// cost O(context) per row per step: 1.87 ms a step for 64 sequences of 1,000-token prompts, docs/benchmarks.md).
//
// One count word per (slot, id): bit 31 set when the id is in the prompt, bits 0-30 the times it was generated. The
// penalties read a word as the CPU sampler does (cpu/sampler.h): the repetition penalty when it is nonzero (seen in the
// prompt or generated), presence and frequency when its generated part is nonzero. A GPU keeps the words dense
// ([slots, vocab], cuda/device_counts.h); the host keeps the nonzero ones (PenaltyCounts), the CPU backend's storage
// and the tests' reference.
#include <cstdint>
#include <span>
#include <unordered_map>

namespace duet::backend {

constexpr uint32_t kCountsInPrompt = 1u << 31;
constexpr uint32_t kCountsGenerated = kCountsInPrompt - 1;  // bits 0-30: never reached by a context (2^31 tokens)

// One change to a slot's counts: clear zeroes the whole slot (id ignored); prompt marks the id as in the prompt
// (idempotent); generated adds one to its generated count.
struct CountsUpdate {
  enum class Kind : uint8_t { clear, prompt, generated };
  int32_t slot = 0;
  int32_t id = 0;
  Kind kind = Kind::generated;
};

// One slot's counts on the host: the words of the ids seen, by id.
class PenaltyCounts {
 public:
  uint32_t word(int32_t id) const {
    const auto it = words_.find(id);
    return it == words_.end() ? 0u : it->second;
  }
  bool in_prompt(int32_t id) const { return (word(id) & kCountsInPrompt) != 0; }
  uint32_t generated(int32_t id) const { return word(id) & kCountsGenerated; }
  bool seen(int32_t id) const { return word(id) != 0; }
  // Every id seen with its word, in no particular order (the samplers apply each id alone).
  const std::unordered_map<int32_t, uint32_t>& words() const { return words_; }
  void clear() { words_.clear(); }
  // A prompt or generated update of `id` (a clear is clear()).
  void add(CountsUpdate::Kind kind, int32_t id) {
    uint32_t& word = words_[id];
    if (kind == CountsUpdate::Kind::prompt) word |= kCountsInPrompt;
    if (kind == CountsUpdate::Kind::generated) word = (word & kCountsInPrompt) | ((word + 1) & kCountsGenerated);
  }

 private:
  std::unordered_map<int32_t, uint32_t> words_;
};

// Refuses (duet::Error, naming the update) a batch with a slot outside [0, slots) or an id outside [0, vocab), before
// any of it applies: a storage never holds half a batch.
void check_counts_updates(std::span<const CountsUpdate> updates, int64_t slots, int32_t vocab);

// The order every storage applies a batch in: its clears first, then the rest in order. A batch may clear a slot and
// send its new sequence's ids at once; clearing last would drop them. clear(slot), then add(update) for the others.
template <typename Clear, typename Add>
void for_counts_updates(std::span<const CountsUpdate> updates, Clear&& clear, Add&& add) {
  for (const CountsUpdate& u : updates)
    if (u.kind == CountsUpdate::Kind::clear) clear(u.slot);
  for (const CountsUpdate& u : updates)
    if (u.kind != CountsUpdate::Kind::clear) add(u);
}

// A batch checked (check_counts_updates), then applied to per-slot host counts (per_slot[slot]).
void apply_counts_updates(std::span<const CountsUpdate> updates, int32_t vocab, std::span<PenaltyCounts> per_slot);

}  // namespace duet::backend
