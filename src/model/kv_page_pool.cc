#include "model/kv_page_pool.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "base/error.h"

namespace duet::model {

KvPagePool::KvPagePool(backend::Backend& backend, const backend::AttentionShape& shape, int64_t layers, int64_t pages) {
  if (pages < 0 || pages > std::numeric_limits<int32_t>::max())
    fail("KV page pool: {} pages is outside [0, {}]", pages, std::numeric_limits<int32_t>::max());
  storage_ = backend.new_kv_pages(shape, layers, pages);
  free_.resize(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(pages - 1 - i);
}

int64_t KvPagePool::free_count() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.size());
}

void KvPagePool::take(int64_t count, std::vector<int32_t>& table) {
  std::lock_guard lock(mutex_);
  if (count > static_cast<int64_t>(free_.size()))
    fail("KV page pool: {} pages asked for, {} of {} are free", count, free_.size(), storage_->count());
  for (int64_t i = 0; i < count; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
}

void KvPagePool::give_back(std::vector<int32_t>& table) {
  std::lock_guard lock(mutex_);
  // Kept sorted so the next take hands out the lowest ids again: page placement stays reproducible run to run.
  free_.insert(free_.end(), table.begin(), table.end());
  std::sort(free_.begin(), free_.end(), std::greater<>());
  table.clear();
}

}  // namespace duet::model
