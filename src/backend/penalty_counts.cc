#include "backend/penalty_counts.h"

#include "base/error.h"

namespace duet::backend {

void check_counts_updates(std::span<const CountsUpdate> updates, int64_t slots, int32_t vocab) {
  for (size_t i = 0; i < updates.size(); ++i) {
    const CountsUpdate& u = updates[i];
    if (u.slot < 0 || u.slot >= slots)
      fail("penalty counts: update {} names slot {} of a storage with {} slots", i, u.slot, slots);
    if (u.kind != CountsUpdate::Kind::clear && (u.id < 0 || u.id >= vocab))
      fail("penalty counts: update {} names id {} outside the vocabulary of {}", i, u.id, vocab);
  }
}

void apply_counts_updates(std::span<const CountsUpdate> updates, int32_t vocab, std::span<PenaltyCounts> per_slot) {
  check_counts_updates(updates, static_cast<int64_t>(per_slot.size()), vocab);
  for_counts_updates(
      updates, [&](int32_t slot) { per_slot[static_cast<size_t>(slot)].clear(); },
      [&](const CountsUpdate& u) { per_slot[static_cast<size_t>(u.slot)].add(u.kind, u.id); });
}

}  // namespace duet::backend
