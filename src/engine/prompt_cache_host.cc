#include "engine/prompt_cache_host.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

HostCacheTier::HostCacheTier(backend::HostStateTier& memory)
    : memory_(memory), swap_room_(memory.snapshots() > 1 ? 1 : 0) {
  for (int64_t s = memory.snapshots() - 1; s >= 0; --s) free_snapshots_.push_back(static_cast<int32_t>(s));
  for (int64_t p = memory.pages() - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
}

bool HostCacheTier::keep(uint64_t key, uint64_t salt, std::span<const int32_t> tokens,
                         std::span<const ImageCacheKey> images, int32_t snapshot, std::span<const int32_t> pages,
                         uint64_t tick) {
  if (memory_.snapshots() == 0 || static_cast<int64_t>(pages.size()) > memory_.pages()) return false;
  if (const int32_t same = find(key, salt, tokens, images); same >= 0) {  // kept before (another device entry's copy)
    touch(same, tick);
    return true;
  }
  // A bring_back's victim (an entry is taken out, its snapshot about to be freed) may use the swap room; anything else
  // leaves it free.
  const size_t snapshots = 1 + static_cast<size_t>(taken_ > 0 ? 0 : swap_room_);
  const auto fits = [&] { return free_snapshots_.size() >= snapshots && free_pages_.size() >= pages.size(); };
  while (!fits() && evict_one()) {
  }
  if (!fits()) return false;  // what is left is taken out
  Entry entry{.key = key,
              .salt = salt,
              .tokens = {tokens.begin(), tokens.end()},
              .images = {images.begin(), images.end()},
              .snapshot = free_snapshots_.back(),
              .pages = {},
              .used = tick};
  free_snapshots_.pop_back();
  for (size_t i = 0; i < pages.size(); ++i) {
    entry.pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  memory_.save_snapshot(snapshot, entry.snapshot);
  memory_.save_pages(pages, entry.pages);
  insert(std::move(entry));
  return true;
}

int32_t HostCacheTier::insert(Entry entry) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [](const auto& e) { return !e.has_value(); });
  if (it == entries_.end()) it = entries_.insert(it, std::nullopt);
  const auto id = static_cast<int32_t>(it - entries_.begin());
  index_.emplace(entry.key, id);
  *it = std::move(entry);
  return id;
}

int32_t HostCacheTier::find(uint64_t key, uint64_t salt, std::span<const int32_t> prefix,
                            std::span<const ImageCacheKey> images) {
  const auto [first, last] = index_.equal_range(key);
  for (auto it = first; it != last; ++it) {
    const Entry& e = *entries_[static_cast<size_t>(it->second)];
    if (e.salt == salt && std::equal(e.tokens.begin(), e.tokens.end(), prefix.begin(), prefix.end()) &&
        std::equal(e.images.begin(), e.images.end(), images.begin(), images.end()))
      return it->second;
  }
  return -1;
}

HostCacheTier::Entry HostCacheTier::take(int32_t id) {
  Entry out = unlink(id);
  ++taken_;
  return out;
}

HostCacheTier::Entry HostCacheTier::unlink(int32_t id) {
  std::optional<Entry>& slot = entries_.at(static_cast<size_t>(id));
  if (!slot) fail("prompt cache host tier: entry {} is not held", id);
  const auto [first, last] = index_.equal_range(slot->key);
  for (auto it = first; it != last; ++it)
    if (it->second == id) {
      index_.erase(it);
      break;
    }
  Entry out = std::move(*slot);
  slot.reset();
  return out;
}

void HostCacheTier::restore_pages(Entry& entry, std::span<const int32_t> pages) {
  if (pages.empty() || pages.size() != entry.pages.size())
    fail("prompt cache host tier: an entry of {} pages restored into {}", entry.pages.size(), pages.size());
  memory_.restore_pages(entry.pages, pages);
  // Reused only by later copies, which the backend orders after these.
  free_pages_.insert(free_pages_.end(), entry.pages.rbegin(), entry.pages.rend());
  entry.pages.clear();
}

void HostCacheTier::restore_snapshot(Entry entry, int32_t snapshot) {
  if (!entry.pages.empty()) fail("prompt cache host tier: a snapshot restored before its entry's pages");
  memory_.restore_snapshot(entry.snapshot, snapshot);
  free_snapshots_.push_back(entry.snapshot);
  --taken_;
}

void HostCacheTier::put_back(Entry entry) {
  if (entry.pages.empty()) fail("prompt cache host tier: an entry put back after its pages were restored");
  insert(std::move(entry));
  --taken_;
}

void HostCacheTier::free_memory(const Entry& entry) {
  free_snapshots_.push_back(entry.snapshot);
  free_pages_.insert(free_pages_.end(), entry.pages.rbegin(), entry.pages.rend());
}

bool HostCacheTier::evict_one() {
  int32_t oldest = -1;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i] && (oldest < 0 || entries_[i]->used < entries_[static_cast<size_t>(oldest)]->used))
      oldest = static_cast<int32_t>(i);
  if (oldest < 0) return false;
  free_memory(unlink(oldest));
  ++evictions_;
  return true;
}

HostCacheTier::Stats HostCacheTier::stats() const {
  Stats out{.evictions = evictions_};
  for (const auto& e : entries_)
    if (e) ++out.entries, ++out.snapshots_held, out.pages_held += static_cast<int64_t>(e->pages.size());
  return out;
}

}  // namespace duet::engine
