#pragma once
// The per-sequence model state, allocated once at start so a request can never fail mid-way for lack of memory:
// `slots` fixed GDN states (conv + delta rule), one lent to one sequence at a time and reset before it is lent
// again, and the model's shared pool of KV pages, which sequences take as they grow. Each slot is lent together
// with a reservation of the pages its request can ever need, so a running sequence never finds the pool empty.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"

namespace duet::engine {

class StatePool {
 public:
  StatePool(model::Model& model, int32_t slots, int32_t max_positions, int64_t kv_pages);

  // Pages that hold `positions` positions.
  int64_t pages_for(int64_t positions) const;
  // The lowest free slot (deterministic), with `kv_pages` pages reserved for it; nullopt when all slots are lent
  // or fewer pages are unreserved.
  std::optional<int32_t> acquire(int64_t kv_pages);
  // Resets the slot's state (its pages go back to the pool), drops its reservation and makes it free again.
  void release(int32_t slot);
  model::SequenceState& state(int32_t slot) { return *states_.at(static_cast<size_t>(slot)); }

  int32_t size() const { return static_cast<int32_t>(states_.size()); }
  int32_t free_count() const;
  int64_t kv_pages_total() const { return kv_pages_total_; }
  int64_t kv_pages_reserved() const { return kv_pages_reserved_; }
  int64_t kv_pages_free() const;  // not held by any of this pool's sequences now
  size_t bytes() const { return bytes_; }

 private:
  int64_t page_positions_;
  std::vector<std::unique_ptr<model::SequenceState>> states_;
  std::vector<bool> lent_;
  std::vector<int64_t> reserved_;  // per slot
  int64_t kv_pages_total_ = 0;
  int64_t kv_pages_reserved_ = 0;
  size_t bytes_ = 0;
};

}  // namespace duet::engine
