#include "engine/state_pool.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

StatePool::StatePool(const model::Model& model, int32_t slots, int32_t max_positions)
    : lent_(static_cast<size_t>(slots), false),
      bytes_(static_cast<size_t>(slots) * model.sequence_state_bytes(max_positions)) {
  states_.reserve(static_cast<size_t>(slots));
  for (int32_t i = 0; i < slots; ++i) states_.push_back(model.new_sequence_state(max_positions));
}

std::optional<int32_t> StatePool::acquire() {
  const auto free = std::find(lent_.begin(), lent_.end(), false);
  if (free == lent_.end()) return std::nullopt;
  *free = true;
  return static_cast<int32_t>(free - lent_.begin());
}

void StatePool::release(int32_t slot) {
  const auto index = static_cast<size_t>(slot);
  if (index >= lent_.size() || !lent_[index]) fail("state pool: slot {} released but not lent", slot);
  states_[index]->reset();  // a reused slot must start as empty as a fresh one (row invariance)
  lent_[index] = false;
}

int32_t StatePool::free_count() const { return static_cast<int32_t>(std::count(lent_.begin(), lent_.end(), false)); }

}  // namespace duet::engine
