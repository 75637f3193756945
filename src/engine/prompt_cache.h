#pragma once
// The prompt cache (issue 18): a prompt's state at chosen 64-token block ends, kept so that a later prompt with the
// same beginning resumes there instead of prefilling it again. An entry is the GDN state of a sequence at a block
// end (a snapshot in the backend's storage) and the KV pages of every position before it (shared through the
// block manager's reference counts). Entries are named by a hash chained over every block's tokens, seeded by what
// changes the rows (the salt: adapter or not); a hit also compares the tokens, so a collision never hands one
// prompt another's state. Only prefill-computed state is cached: entries are made while a prompt prefills, from the
// slot after a step that ended at the block end (insert), or from a snapshot the step wrote on its way past it
// (reserve, commit: engine/step_snapshots.h).
// Least-recently-used entries go first when the snapshots or the page budget run out. A decision's entry also holds
// what its sink keeps of the prefix (engine/decision_sink.h: the head's memory rows), within a budget of bytes of
// its own, and resumes only decisions (its salt is theirs). With a host tier (add_host_tier, prompt_cache_host.h) an
// entry the device tier lets go is copied to host memory instead of dropped, and a prompt that finds it there has it
// brought back (bring_back) before it resumes, exactly as from the device tier. A prompt's images (image_cache_key.h)
// are part of its key: each image's digest is chained in at the block of its first token, and an entry keeps the images
// of its prefix, compared on every hit as the tokens are, so a prefix is resumed only with the very images it was
// computed from. Engine thread only.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "engine/decision_sink.h"
#include "engine/image_cache_key.h"
#include "engine/prompt_cache_host.h"

namespace duet::engine {

class PromptCache {
 public:
  // The hash of one block given the hash of everything before it (tests plant collisions with their own).
  using BlockHash = std::function<uint64_t(uint64_t previous, std::span<const int32_t> block)>;
  static uint64_t default_block_hash(uint64_t previous, std::span<const int32_t> block);

  // `snapshots` GDN snapshots of `storage`, up to `max_pages` KV pages and `max_decision_bytes` of decisions'
  // prefixes held at once.
  PromptCache(BlockManager& blocks, backend::StateStorage& storage, int32_t snapshots, int64_t max_pages,
              BlockHash hash = default_block_hash, size_t max_decision_bytes = 0);

  struct Hit {
    int32_t snapshot = -1;
    std::vector<int32_t> pages;                      // the prefix's pages, one per block
    std::shared_ptr<const DecisionPrefix> decision;  // a decision lookup's: what the sink kept of the prefix
    // A hit in the host tier: its host entry and length, no snapshot or pages until bring_back() makes it a device
    // tier hit.
    int32_t host = -1;
    int64_t host_tokens = 0;
    bool on_host() const { return host >= 0; }
    int64_t tokens() const {
      return on_host() ? host_tokens : static_cast<int64_t>(pages.size()) * backend::kKvPagePositions;
    }
  };
  // The longest cached prefix of `prompt` that leaves at least one token to prefill (its last row samples), or
  // nullopt. A host tier entry is found as well (a device tier one first at the same length); decisions look only in
  // the device tier. Counts nothing: the engine counts a hit when it admits the sequence with it (note_admitted). A
  // decision's lookup (`decision`) takes only entries whose sink prefix is ready, of at most `max_tokens`. `images`
  // are the prompt's, in prompt order.
  std::optional<Hit> lookup(uint64_t salt, std::span<const int32_t> prompt, bool decision = false,
                            int64_t max_tokens = INT64_MAX, std::span<const ImageCacheKey> images = {});
  void note_admitted(const std::optional<Hit>& hit);
  // A host tier hit (lookup) made a device tier one: its pages taken from the unpromised free pages (a request that
  // would fit without a hit has them), a device snapshot taken (the least recently used device entry goes to the host,
  // into the host tier's swap room: prompt_cache_host.h), both filled from the host copy, and the entry moved to the
  // device tier as the most recently used. A device hit comes back as it is; nullopt (the entry stays on the host) when
  // the pages or a snapshot cannot be had.
  std::optional<Hit> bring_back(const Hit& hit);
  // The second tier, in `memory` (which outlives the cache): from now on evicted entries go there.
  void add_host_tier(backend::HostStateTier& memory);
  // Keeps the state of `slot`, which has just prefilled `prefix` (a whole number of blocks, its position now):
  // a snapshot of its GDN state and a reference to the prefix's pages, and for a decision its sink's prefix (set
  // later by a decision worker) counted as `decision_bytes`. Nothing when the same prefix (with the same images) is
  // cached; false when a decision's prefix alone is over the budget (nothing kept). `images`: the prompt's (those
  // past the prefix are left out).
  bool insert(uint64_t salt, std::span<const int32_t> prefix, int32_t slot,
              std::shared_ptr<PendingDecisionPrefix> decision = nullptr, size_t decision_bytes = 0,
              std::span<const ImageCacheKey> images = {});
  // The same, for a state a step writes inside its rows (backend::StepSnapshot): reserve() before the step gives the
  // snapshot it writes (taken from the free ones, else the least recently used entry's), or nullopt when this prefix
  // is cached already (it counts as used) or every snapshot is reserved. After the step has run the slot at least to
  // the prefix's end, commit() makes it the prefix's entry with the prefix's pages (full, and never written again by
  // the slot: it writes only past the step); a step that failed or was refused gives it back with release(). Nothing
  // else may be reserved across steps.
  std::optional<int32_t> reserve(uint64_t salt, std::span<const int32_t> prefix,
                                 std::span<const ImageCacheKey> images = {});
  // A decision's entry carries its sink's prefix and counts `decision_bytes`, as insert()'s; false when that alone is
  // over the budget (the snapshot goes back).
  bool commit(int32_t snapshot, uint64_t salt, std::span<const int32_t> prefix, int32_t slot,
              std::span<const ImageCacheKey> images = {}, std::shared_ptr<PendingDecisionPrefix> decision = nullptr,
              size_t decision_bytes = 0);
  void release(int32_t snapshot);
  // Drops the least recently used entry; false when there is none.
  bool evict_one();
  // Pages that only the cache holds (no sequence reads them): what evicting everything would give back.
  int64_t reclaimable_pages() const;

  bool enabled() const { return !entries_.empty(); }
  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0, cached_tokens = 0;
    int64_t entries = 0, pages_held = 0;
    size_t decision_bytes_held = 0;
    // The host tier: hits brought back from it (counted in hits too), entries dropped there for room, and what it
    // holds.
    int64_t host_hits = 0, host_evictions = 0, host_entries = 0, host_snapshots_held = 0, host_pages_held = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t salt = 0;
    std::vector<int32_t> tokens;        // the whole prefix, compared on every hit
    std::vector<ImageCacheKey> images;  // the images whose first token is in the prefix, compared likewise
    std::vector<int32_t> pages;
    std::shared_ptr<PendingDecisionPrefix> decision;  // a decision's entry: its sink's prefix, once set
    size_t decision_bytes = 0;
    uint64_t used = 0;  // the tick of its last insert or hit
  };
  std::vector<uint64_t> chain(uint64_t salt, std::span<const int32_t> tokens, int64_t blocks,
                              std::span<const ImageCacheKey> images) const;
  void evict(int32_t snapshot);
  int32_t add_entry(int32_t snapshot, Entry entry);
  Entry* find(uint64_t key, uint64_t salt, std::span<const int32_t> prefix, std::span<const ImageCacheKey> own);
  std::optional<int32_t> take_snapshot();
  bool add(int32_t snapshot, uint64_t key, uint64_t salt, std::span<const int32_t> prefix,
           std::span<const ImageCacheKey> own, int32_t slot, std::shared_ptr<PendingDecisionPrefix> decision,
           size_t decision_bytes);

  BlockManager& blocks_;
  backend::StateStorage& storage_;
  int64_t max_pages_;
  BlockHash hash_;
  size_t max_decision_bytes_;
  size_t decision_bytes_held_ = 0;
  std::vector<std::optional<Entry>> entries_;  // by snapshot id
  std::vector<int32_t> free_snapshots_;
  std::vector<int32_t> reserved_;                     // snapshots a step writes into, not yet committed or released
  std::unordered_multimap<uint64_t, int32_t> index_;  // key -> snapshot id; collisions sit side by side
  std::unordered_map<int32_t, int32_t> page_holds_;   // page -> entries holding it
  uint64_t tick_ = 0;
  Stats stats_;
  std::optional<HostCacheTier> host_;
};

}  // namespace duet::engine
