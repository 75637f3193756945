#pragma once
// The per-sequence model state (GDN conv + delta-rule state, attention K/V) for `parallel` sequences,
// allocated once at start so a request can never fail mid-way for lack of memory. A slot is lent to one
// sequence at a time and reset before it is lent again.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"

namespace duet::engine {

class StatePool {
 public:
  StatePool(const model::Model& model, int32_t slots, int32_t max_positions);

  // The lowest free slot (deterministic), or nullopt when all are lent.
  std::optional<int32_t> acquire();
  // Resets the slot's state and makes it free again.
  void release(int32_t slot);
  model::SequenceState& state(int32_t slot) { return *states_.at(static_cast<size_t>(slot)); }

  int32_t size() const { return static_cast<int32_t>(states_.size()); }
  int32_t free_count() const;
  size_t bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<model::SequenceState>> states_;
  std::vector<bool> lent_;
  size_t bytes_ = 0;
};

}  // namespace duet::engine
