#include "engine/block_manager.h"

#include <algorithm>

#include "backend/backend.h"
#include "base/error.h"

namespace duet::engine {

BlockManager::BlockManager(int32_t slots, int64_t pages)
    : slots_(static_cast<size_t>(std::max(slots, 0))), refs_(static_cast<size_t>(std::max<int64_t>(pages, 0)), 0) {
  if (slots < 0 || pages < 0) fail("block manager: {} slots and {} pages", slots, pages);
  for (int64_t p = 0; p < pages; ++p) free_pages_.insert(free_pages_.end(), static_cast<int32_t>(p));
}

int64_t BlockManager::pages_for(int64_t positions) {
  return (positions + backend::kKvPagePositions - 1) / backend::kKvPagePositions;
}

BlockManager::Slot& BlockManager::slot_at(int32_t slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size() || !slots_[static_cast<size_t>(slot)].lent)
    fail("block manager: slot {} is not lent", slot);
  return slots_[static_cast<size_t>(slot)];
}

const BlockManager::Slot& BlockManager::slot_at(int32_t slot) const {
  return const_cast<BlockManager*>(this)->slot_at(slot);
}

int32_t BlockManager::free_slots() const {
  return static_cast<int32_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.lent; }));
}

bool BlockManager::can_acquire(int64_t limit_pages, int64_t shared_pages) const {
  const bool slot_free = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.lent; });
  return slot_free && shared_pages <= limit_pages && limit_pages - shared_pages <= free_pages() - reserved_;
}

std::optional<int32_t> BlockManager::acquire(int64_t limit_pages, std::span<const int32_t> shared) {
  if (!can_acquire(limit_pages, static_cast<int64_t>(shared.size()))) return std::nullopt;
  const auto index = static_cast<size_t>(
      std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.lent; }) - slots_.begin());
  Slot& s = slots_[index];
  s = Slot{.lent = true, .table = {}, .position = 0, .reserved = limit_pages - static_cast<int64_t>(shared.size())};
  reserved_ += s.reserved;
  for (int32_t page : shared) append_shared(s, page);
  s.position = static_cast<int64_t>(shared.size()) * backend::kKvPagePositions;
  return static_cast<int32_t>(index);
}

void BlockManager::release(int32_t slot) {
  Slot& s = slot_at(slot);
  for (int32_t page : s.table) unref(page);
  reserved_ -= s.reserved;
  s = Slot{};
}

void BlockManager::append_shared(Slot& s, int32_t page) {
  if (page < 0 || static_cast<size_t>(page) >= refs_.size() || refs_[static_cast<size_t>(page)] == 0)
    fail("block manager: page {} is shared but nobody holds it", page);
  ++refs_[static_cast<size_t>(page)];
  s.table.push_back(page);
}

int32_t BlockManager::take_page() {
  const int32_t page = *free_pages_.begin();
  free_pages_.erase(free_pages_.begin());
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

void BlockManager::unref(int32_t page) {
  int32_t& refs = refs_.at(static_cast<size_t>(page));
  if (refs <= 0) fail("block manager: page {} released more often than held", page);
  if (--refs == 0) free_pages_.insert(page);
}

void BlockManager::cover(int32_t slot, int64_t positions) {
  Slot& s = slot_at(slot);
  const int64_t more = pages_for(positions) - static_cast<int64_t>(s.table.size());
  if (more <= 0) return;
  // Its own reservation first; beyond it only pages nobody else was promised.
  const int64_t from_reservation = std::min(more, s.reserved);
  if (more - from_reservation > free_pages() - reserved_)
    fail("KV page pool: {} pages asked for, {} of {} are free and {} of those promised to running sequences", more,
         free_pages(), pages(), reserved_);
  for (int64_t i = 0; i < more; ++i) s.table.push_back(take_page());
  s.reserved -= from_reservation;
  reserved_ -= from_reservation;
}

void BlockManager::check_writable(int32_t slot, int64_t from, int64_t to) const {
  const Slot& s = slot_at(slot);
  if (to <= from) return;
  const int64_t first = from / backend::kKvPagePositions, last = (to - 1) / backend::kKvPagePositions;
  if (last >= static_cast<int64_t>(s.table.size()))
    fail("block manager: slot {} writes position {} past its {} pages", slot, to - 1, s.table.size());
  for (int64_t i = first; i <= last; ++i)
    if (refs_[static_cast<size_t>(s.table[static_cast<size_t>(i)])] != 1)
      fail("block manager: slot {} would write KV page {}, which {} sequences or cache entries share", slot,
           s.table[static_cast<size_t>(i)], refs_[static_cast<size_t>(s.table[static_cast<size_t>(i)])]);
}

std::vector<std::pair<int32_t, int32_t>> BlockManager::fork(int32_t from, int32_t to) {
  const Slot& source = slot_at(from);
  Slot& target = slot_at(to);
  if (from == to || !target.table.empty() || target.position != 0)
    fail("block manager: slot {} cannot fork from {}: it is not an empty sequence", to, from);
  const int64_t full = source.position / backend::kKvPagePositions;
  const bool partial = source.position % backend::kKvPagePositions != 0;
  // The fresh page must be there before anything is shared, so a refusal leaves `to` as it was.
  if (partial && target.reserved == 0 && free_pages() - reserved_ < 1)
    fail("KV page pool: a fork needs a page, {} of {} are free and {} promised", free_pages(), pages(), reserved_);
  for (int64_t i = 0; i < full; ++i) append_shared(target, source.table[static_cast<size_t>(i)]);
  // Shared pages come out of the fork's reservation: it will never take them from the free list.
  const int64_t unneeded = std::min(full, target.reserved);
  target.reserved -= unneeded;
  reserved_ -= unneeded;
  target.position = source.position;
  if (!partial) return {};
  const int32_t copy = source.table[static_cast<size_t>(full)];
  cover(to, source.position);
  return {{copy, target.table.back()}};
}

void BlockManager::retain(std::span<const int32_t> pages) {
  for (int32_t page : pages) {
    if (page < 0 || static_cast<size_t>(page) >= refs_.size() || refs_[static_cast<size_t>(page)] == 0)
      fail("block manager: page {} is retained but nobody holds it", page);
    ++refs_[static_cast<size_t>(page)];
  }
}

std::optional<std::vector<int32_t>> BlockManager::take_unpromised(int64_t count) {
  if (count < 0 || count > free_pages() - reserved_) return std::nullopt;
  std::vector<int32_t> pages;
  for (int64_t i = 0; i < count; ++i) pages.push_back(take_page());
  return pages;
}

void BlockManager::drop(std::span<const int32_t> pages) {
  for (int32_t page : pages) unref(page);
}

}  // namespace duet::engine
