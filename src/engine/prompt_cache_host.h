#pragma once
// The prompt cache's second tier (issue 18): entries the device tier lets go (least recently used), copied into host
// memory (backend::HostStateTier: pinned on a GPU) instead of dropped, within the host budget and least recently used
// first there too. An entry here holds no device memory at all, so nothing a running sequence reads is ever held or
// freed by it; PromptCache::bring_back copies one back into fresh device pages and a device snapshot when a prompt
// resumes from it, and it leaves this tier (an entry lives in one tier at a time).
//
// Each entry keeps its own copy of every page of its prefix (the device tier shares pages between entries of one
// conversation; here two entries of one prompt hold two copies): simpler, and host memory is the cheap kind.
// A decision's entries are not kept here (their sink's prefix is device memory on a GPU head): they are dropped.
//
// Swap room: bringing an entry back usually takes the device tier's least recently used entry's snapshot, and that
// victim moves here while the entry brought back still holds its host snapshot (the victim's device snapshot is where
// the entry's is restored, so the victim's must be copied out first). So the tier keeps one snapshot free while no
// entry is being brought back (take() .. restore_snapshot()), and only that bring_back's victim may take it; the
// entry's own snapshot, freed right after, is the next swap room. Without it a full tier drops one more of its entries
// at every bring_back, and a tier of one snapshot drops every victim (the H200's host tier failure: the plan gave tiny
// models one snapshot). Pages need no room of their own: an entry's pages are restored into fresh device pages and
// freed here before the victim moves (restore_pages, then restore_snapshot). Engine thread only, like the cache.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/image_cache_key.h"

namespace duet::engine {

class HostCacheTier {
 public:
  explicit HostCacheTier(backend::HostStateTier& memory);

  struct Entry {
    uint64_t key = 0, salt = 0;
    std::vector<int32_t> tokens;  // the whole prefix, compared on every hit
    std::vector<ImageCacheKey> images;
    int32_t snapshot = -1;       // host snapshot id
    std::vector<int32_t> pages;  // host page ids, in position order
    uint64_t used = 0;           // the tick of its last keep or hit
  };

  // Copies device snapshot `snapshot` and device `pages` (the prefix's, in position order; nobody writes them) into a
  // new entry, making room by dropping the least recently used entries (and keeping the swap room free unless an entry
  // is being brought back); false when it cannot fit even alone.
  bool keep(uint64_t key, uint64_t salt, std::span<const int32_t> tokens, std::span<const ImageCacheKey> images,
            int32_t snapshot, std::span<const int32_t> pages, uint64_t tick);
  // The entry of exactly `prefix` (tokens and images compared, the hash only finds candidates), or -1.
  int32_t find(uint64_t key, uint64_t salt, std::span<const int32_t> prefix, std::span<const ImageCacheKey> images);
  const Entry& entry(int32_t id) const { return *entries_.at(static_cast<size_t>(id)); }
  void touch(int32_t id, uint64_t tick) { entries_.at(static_cast<size_t>(id))->used = tick; }
  // Takes entry `id` out of the tier's index and eviction order (nothing evicts it), its host memory still its own:
  // then restore_pages() copies its pages into device `pages` and frees them here, and restore_snapshot() its snapshot
  // into device snapshot `snapshot` and frees it (pages first: the device tier's victim, moved here in between, may
  // need them); or, before restore_pages, put_back() returns it. The copies are ordered before any later copy into the
  // host memory they free (the backend's: one stream on a GPU).
  Entry take(int32_t id);
  void restore_pages(Entry& entry, std::span<const int32_t> pages);
  void restore_snapshot(Entry entry, int32_t snapshot);
  void put_back(Entry entry);

  struct Stats {
    int64_t entries = 0, evictions = 0, snapshots_held = 0, pages_held = 0;
  };
  Stats stats() const;
  backend::HostStateTier& memory() { return memory_; }

 private:
  bool evict_one();
  int32_t insert(Entry entry);
  Entry unlink(int32_t id);
  void free_memory(const Entry& entry);

  backend::HostStateTier& memory_;
  std::vector<std::optional<Entry>> entries_;  // by id (ids reused)
  std::unordered_multimap<uint64_t, int32_t> index_;
  std::vector<int32_t> free_snapshots_, free_pages_;  // host ids nobody holds
  int64_t evictions_ = 0;
  int64_t swap_room_ = 0;  // snapshots kept free for a bring_back's victim: one when the memory has two or more
  int64_t taken_ = 0;      // entries taken out (take) and not yet restored or put back
};

}  // namespace duet::engine
