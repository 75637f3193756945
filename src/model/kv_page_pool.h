#pragma once
// The attention layers' KV pages (backend storage) and which of them are free. Sequence states take pages as they
// grow and give them all back on reset and destruction; they share ownership of the pool, so a state that outlives
// its model's reference still returns its pages to live bookkeeping.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace duet::model {

class KvPagePool {
 public:
  KvPagePool(backend::Backend& backend, const backend::AttentionShape& shape, int64_t layers, int64_t pages);

  backend::KvPages& storage() { return *storage_; }
  int64_t total() const { return storage_->count(); }
  int64_t free_count() const;
  // Appends `count` free pages to `table`, lowest ids first (deterministic); throws if fewer are free.
  void take(int64_t count, std::vector<int32_t>& table);
  // Returns every page of `table` and clears it.
  void give_back(std::vector<int32_t>& table);

 private:
  std::unique_ptr<backend::KvPages> storage_;
  mutable std::mutex mutex_;   // states may be reset or destroyed on another thread than the one that runs steps
  std::vector<int32_t> free_;  // a stack: the lowest free id on top
};

// Pages needed to hold `positions` positions.
constexpr int64_t kv_pages_for(int64_t positions) {
  return (positions + backend::kKvPagePositions - 1) / backend::kKvPagePositions;
}

}  // namespace duet::model
