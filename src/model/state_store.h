#pragma once
// The backend storage of sequence state (GDN slots and KV pages, model-wide) and which slots and pages are free.
// Sequence states take a slot when they are made and pages as they grow, and give them back on reset (pages) and
// destruction (both); they share ownership of the store, so a state that outlives its model's reference still
// returns what it holds to live bookkeeping.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace duet::model {

class StateStore {
 public:
  StateStore(backend::Backend& backend, const backend::GdnShape& gdn, int64_t gdn_layers, int64_t slots,
             const backend::AttentionShape& attention, int64_t attention_layers, int64_t pages);

  backend::StateStorage& storage() { return *storage_; }
  int64_t total_pages() const { return storage_->pages(); }
  int64_t free_pages() const;
  // The lowest free slot, its GDN state reset; throws when every slot is held.
  int32_t take_slot();
  void give_back_slot(int32_t slot);
  // Appends `count` free pages to `table`, lowest ids first (deterministic); throws if fewer are free.
  void take_pages(int64_t count, std::vector<int32_t>& table);
  // Returns every page of `table` and clears it.
  void give_back_pages(std::vector<int32_t>& table);

 private:
  std::unique_ptr<backend::StateStorage> storage_;
  mutable std::mutex mutex_;         // states may be reset or destroyed on another thread than the one that runs steps
  std::vector<int32_t> free_pages_;  // a stack: the lowest free id on top
  std::vector<int32_t> free_slots_;  // likewise
};

// Pages needed to hold `positions` positions.
constexpr int64_t kv_pages_for(int64_t positions) {
  return (positions + backend::kKvPagePositions - 1) / backend::kKvPagePositions;
}

}  // namespace duet::model
