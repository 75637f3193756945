#include "model/state_store.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "base/error.h"

namespace duet::model {

namespace {

// Ids count-1 .. 0, so the back of the vector (the top of the stack) is the lowest id.
std::vector<int32_t> descending_ids(int64_t count) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(count - 1 - i);
  return ids;
}

}  // namespace

StateStore::StateStore(backend::Backend& backend, const backend::GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                       const backend::AttentionShape& attention, int64_t attention_layers, int64_t pages) {
  constexpr int64_t kMaxIds = std::numeric_limits<int32_t>::max();
  if (pages < 0 || pages > kMaxIds) fail("state store: {} KV pages is outside [0, {}]", pages, kMaxIds);
  if (slots < 0 || slots > kMaxIds) fail("state store: {} sequence slots is outside [0, {}]", slots, kMaxIds);
  storage_ = backend.new_state_storage(gdn, gdn_layers, slots, attention, attention_layers, pages);
  free_pages_ = descending_ids(pages);
  free_slots_ = descending_ids(slots);
}

int64_t StateStore::free_pages() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_pages_.size());
}

int32_t StateStore::take_slot() {
  int32_t slot;
  {
    std::lock_guard lock(mutex_);
    if (free_slots_.empty()) fail("state store: all {} sequence slots are held", storage_->slots());
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  storage_->reset_slot(slot);  // a reused slot starts as empty as a fresh one (row invariance)
  return slot;
}

void StateStore::give_back_slot(int32_t slot) {
  std::lock_guard lock(mutex_);
  free_slots_.push_back(slot);
  std::sort(free_slots_.begin(), free_slots_.end(), std::greater<>());
}

void StateStore::take_pages(int64_t count, std::vector<int32_t>& table) {
  std::lock_guard lock(mutex_);
  if (count > static_cast<int64_t>(free_pages_.size()))
    fail("KV page pool: {} pages asked for, {} of {} are free", count, free_pages_.size(), storage_->pages());
  for (int64_t i = 0; i < count; ++i) {
    table.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
}

void StateStore::give_back_pages(std::vector<int32_t>& table) {
  std::lock_guard lock(mutex_);
  // Kept sorted so the next take hands out the lowest ids again: page placement stays reproducible run to run.
  free_pages_.insert(free_pages_.end(), table.begin(), table.end());
  std::sort(free_pages_.begin(), free_pages_.end(), std::greater<>());
  table.clear();
}

}  // namespace duet::model
