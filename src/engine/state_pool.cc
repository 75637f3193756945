#include "engine/state_pool.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

StatePool::StatePool(model::Model& model, int32_t slots, int32_t max_positions, int64_t kv_pages)
    : page_positions_(model.kv_page_positions()),
      lent_(static_cast<size_t>(slots), false),
      reserved_(static_cast<size_t>(slots), 0),
      kv_pages_total_(kv_pages),
      bytes_(static_cast<size_t>(slots) * model.sequence_fixed_bytes() +
             static_cast<size_t>(kv_pages) * model.kv_page_bytes()) {
  model.reserve_state(slots, kv_pages);  // before any state, so every state takes its slot and pages from the store
  states_.reserve(static_cast<size_t>(slots));
  for (int32_t i = 0; i < slots; ++i) states_.push_back(model.new_sequence_state(max_positions));
}

int64_t StatePool::pages_for(int64_t positions) const { return (positions + page_positions_ - 1) / page_positions_; }

// Counted from the states themselves: exact even when another engine on the same model reserved a newer pool.
int64_t StatePool::kv_pages_free() const {
  int64_t held = 0;
  for (const auto& state : states_) held += state->kv_pages();
  return kv_pages_total_ - held;
}

std::optional<int32_t> StatePool::acquire(int64_t kv_pages) {
  if (kv_pages > kv_pages_total_ - kv_pages_reserved_) return std::nullopt;
  const auto free = std::find(lent_.begin(), lent_.end(), false);
  if (free == lent_.end()) return std::nullopt;
  *free = true;
  const auto index = static_cast<size_t>(free - lent_.begin());
  reserved_[index] = kv_pages;
  kv_pages_reserved_ += kv_pages;
  return static_cast<int32_t>(index);
}

void StatePool::release(int32_t slot) {
  const auto index = static_cast<size_t>(slot);
  if (index >= lent_.size() || !lent_[index]) fail("state pool: slot {} released but not lent", slot);
  states_[index]->reset();  // a reused slot must start as empty as a fresh one (row invariance)
  kv_pages_reserved_ -= reserved_[index];
  reserved_[index] = 0;
  lent_[index] = false;
}

int32_t StatePool::free_count() const { return static_cast<int32_t>(std::count(lent_.begin(), lent_.end(), false)); }

}  // namespace duet::engine
