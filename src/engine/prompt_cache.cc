#include "engine/prompt_cache.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string>

#include "backend/seeded_draw.h"
#include "base/error.h"

namespace duet::engine {

namespace {
constexpr int64_t kBlock = backend::kKvPagePositions;
}

uint64_t PromptCache::default_block_hash(uint64_t previous, std::span<const int32_t> block) {
  uint64_t h = backend::mix64(previous);
  for (int32_t id : block) h = backend::mix64(h ^ static_cast<uint32_t>(id));
  return h;
}

PromptCache::PromptCache(BlockManager& blocks, backend::StateStorage& storage, int32_t snapshots, int64_t max_pages,
                         BlockHash hash, size_t max_decision_bytes)
    : blocks_(blocks),
      storage_(storage),
      max_pages_(max_pages),
      hash_(std::move(hash)),
      max_decision_bytes_(max_decision_bytes) {
  if (snapshots > storage.snapshots())
    fail("prompt cache: {} snapshots asked for, the storage has {}", snapshots, storage.snapshots());
  entries_.resize(static_cast<size_t>(std::max(snapshots, 0)));
  for (int32_t s = snapshots - 1; s >= 0; --s) free_snapshots_.push_back(s);  // lowest id on top
}

std::vector<uint64_t> PromptCache::chain(uint64_t salt, std::span<const int32_t> tokens, int64_t blocks,
                                         std::span<const ImageCacheKey> images) const {
  std::vector<uint64_t> keys;
  uint64_t h = backend::mix64(salt ^ 0x70726f6d7074ULL);
  size_t image = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    h = hash_(h, tokens.subspan(static_cast<size_t>(b * kBlock), kBlock));
    // Each image whose first token is in this block, through the same block hash (so a planted collision collides
    // images too, and the comparison on a hit is what tells them apart); every later block chains from it.
    for (; image < images.size() && images[image].first_token < (b + 1) * kBlock; ++image) {
      const uint64_t digest = std::hash<std::string>{}(images[image].digest);
      const std::array<int32_t, 3> words{images[image].first_token, static_cast<int32_t>(digest),
                                         static_cast<int32_t>(digest >> 32)};
      h = hash_(h, words);
    }
    keys.push_back(h);
  }
  return keys;
}

std::optional<PromptCache::Hit> PromptCache::lookup(uint64_t salt, std::span<const int32_t> prompt, bool decision,
                                                    int64_t max_tokens, std::span<const ImageCacheKey> images) {
  if (entries_.empty() || prompt.empty()) return std::nullopt;
  // Leave a token to prefill.
  const int64_t blocks = std::min((static_cast<int64_t>(prompt.size()) - 1) / kBlock, max_tokens / kBlock);
  const std::vector<uint64_t> keys = chain(salt, prompt, blocks, images);
  for (int64_t b = blocks; b >= 1; --b) {
    const auto [first, last] = index_.equal_range(keys[static_cast<size_t>(b - 1)]);
    for (auto it = first; it != last; ++it) {
      Entry& entry = *entries_[static_cast<size_t>(it->second)];
      const auto length = static_cast<size_t>(b * kBlock);
      // The hash only finds candidates; the tokens and the images decide.
      const std::span<const ImageCacheKey> own = images_before(images, static_cast<int64_t>(length));
      if (entry.salt != salt || entry.tokens.size() != length ||
          !std::equal(entry.tokens.begin(), entry.tokens.end(), prompt.begin()) ||
          !std::equal(entry.images.begin(), entry.images.end(), own.begin(), own.end()))
        continue;
      std::shared_ptr<const DecisionPrefix> kept;
      if (decision) {
        kept = entry.decision ? entry.decision->get() : nullptr;
        if (kept == nullptr || kept->positions() != static_cast<int64_t>(length)) continue;  // not (yet) kept
      }
      entry.used = ++tick_;
      return Hit{
          .snapshot = it->second, .pages = entry.pages, .decision = std::move(kept), .host = -1, .host_tokens = 0};
    }
    if (host_ && !decision) {
      const auto length = static_cast<size_t>(b * kBlock);
      const int32_t id = host_->find(keys[static_cast<size_t>(b - 1)], salt, prompt.first(length),
                                     images_before(images, static_cast<int64_t>(length)));
      if (id >= 0) {
        host_->touch(id, ++tick_);
        return Hit{
            .snapshot = -1, .pages = {}, .decision = nullptr, .host = id, .host_tokens = static_cast<int64_t>(length)};
      }
    }
  }
  return std::nullopt;
}

void PromptCache::add_host_tier(backend::HostStateTier& memory) { host_.emplace(memory); }

std::optional<PromptCache::Hit> PromptCache::bring_back(const Hit& hit) {
  if (!hit.on_host()) return hit;
  if (!host_) fail("prompt cache: a host tier hit without a host tier");
  // A device snapshot is free or an entry's to take (not every one reserved by a step), else it stays on the host.
  if (free_snapshots_.empty() &&
      std::none_of(entries_.begin(), entries_.end(), [](const auto& e) { return e.has_value(); }))
    return std::nullopt;
  // Out of the host tier's reach first: making room below moves device entries there, which may evict host entries.
  HostCacheTier::Entry entry = host_->take(hit.host);
  std::optional<std::vector<int32_t>> pages = blocks_.take_unpromised(static_cast<int64_t>(entry.pages.size()));
  if (!pages) {
    host_->put_back(std::move(entry));
    return std::nullopt;
  }
  Entry device{.key = entry.key,
               .salt = entry.salt,
               .tokens = entry.tokens,
               .images = entry.images,
               .pages = *pages,
               .decision = nullptr,
               .decision_bytes = 0,
               .used = ++tick_};
  // The pages first, which frees their host copies; then the snapshot, which may push the device tier's least recently
  // used entry to the host (into the tier's swap room: this entry's host snapshot is still its own until restored
  // into the snapshot that victim leaves). Every copy is ordered after the ones before it (prompt_cache_host.h).
  host_->restore_pages(entry, *pages);
  const std::optional<int32_t> snapshot = take_snapshot();
  if (!snapshot) fail("prompt cache: no device snapshot to bring a host tier entry back into");  // checked above
  host_->restore_snapshot(std::move(entry), *snapshot);
  // The pages' one reference (take_unpromised's) is the entry's.
  if (add_entry(*snapshot, std::move(device)) < 0) return std::nullopt;
  ++stats_.host_hits;
  const Entry& kept = *entries_[static_cast<size_t>(*snapshot)];
  return Hit{.snapshot = *snapshot, .pages = kept.pages, .decision = nullptr, .host = -1, .host_tokens = 0};
}

void PromptCache::note_admitted(const std::optional<Hit>& hit) {
  if (entries_.empty()) return;
  if (!hit) {
    ++stats_.misses;
    return;
  }
  ++stats_.hits;
  stats_.cached_tokens += hit->tokens();
}

PromptCache::Entry* PromptCache::find(uint64_t key, uint64_t salt, std::span<const int32_t> prefix,
                                      std::span<const ImageCacheKey> own) {
  const auto [first, last] = index_.equal_range(key);
  for (auto it = first; it != last; ++it) {
    Entry& entry = *entries_[static_cast<size_t>(it->second)];
    if (entry.salt == salt && std::equal(entry.tokens.begin(), entry.tokens.end(), prefix.begin(), prefix.end()) &&
        std::equal(entry.images.begin(), entry.images.end(), own.begin(), own.end()))
      return &entry;
  }
  return nullptr;
}

// A free snapshot, the least recently used entry's when none is free; nullopt when all are reserved.
std::optional<int32_t> PromptCache::take_snapshot() {
  if (free_snapshots_.empty() && !evict_one()) return std::nullopt;
  const int32_t snapshot = free_snapshots_.back();
  free_snapshots_.pop_back();
  return snapshot;
}

bool PromptCache::insert(uint64_t salt, std::span<const int32_t> prefix, int32_t slot,
                         std::shared_ptr<PendingDecisionPrefix> decision, size_t decision_bytes,
                         std::span<const ImageCacheKey> images) {
  const int64_t blocks = static_cast<int64_t>(prefix.size()) / kBlock;
  if (entries_.empty() || blocks == 0) return false;
  if (decision != nullptr && decision_bytes > max_decision_bytes_) return false;
  if (static_cast<int64_t>(prefix.size()) % kBlock != 0 ||
      blocks_.position(slot) != static_cast<int64_t>(prefix.size()))
    fail("prompt cache: slot {} at position {} cannot be cached as a prefix of {} tokens", slot, blocks_.position(slot),
         prefix.size());
  const std::span<const ImageCacheKey> own = images_before(images, static_cast<int64_t>(prefix.size()));
  const uint64_t key = chain(salt, prefix, blocks, own).back();
  if (Entry* same = find(key, salt, prefix, own)) {
    same->used = ++tick_;
    return false;
  }
  const std::optional<int32_t> snapshot = take_snapshot();
  if (!snapshot) return false;
  storage_.save_snapshot(slot, *snapshot);
  return add(*snapshot, key, salt, prefix, own, slot, std::move(decision), decision_bytes);
}

std::optional<int32_t> PromptCache::reserve(uint64_t salt, std::span<const int32_t> prefix,
                                            std::span<const ImageCacheKey> images) {
  const int64_t blocks = static_cast<int64_t>(prefix.size()) / kBlock;
  if (entries_.empty() || blocks == 0) return std::nullopt;
  if (static_cast<int64_t>(prefix.size()) % kBlock != 0)
    fail("prompt cache: a snapshot reserved for a prefix of {} tokens, not a block end", prefix.size());
  const std::span<const ImageCacheKey> own = images_before(images, static_cast<int64_t>(prefix.size()));
  if (Entry* same = find(chain(salt, prefix, blocks, own).back(), salt, prefix, own)) {
    same->used = ++tick_;
    return std::nullopt;
  }
  const std::optional<int32_t> snapshot = take_snapshot();
  if (snapshot) reserved_.push_back(*snapshot);
  return snapshot;
}

bool PromptCache::commit(int32_t snapshot, uint64_t salt, std::span<const int32_t> prefix, int32_t slot,
                         std::span<const ImageCacheKey> images, std::shared_ptr<PendingDecisionPrefix> decision,
                         size_t decision_bytes) {
  const auto it = std::find(reserved_.begin(), reserved_.end(), snapshot);
  if (it == reserved_.end()) fail("prompt cache: snapshot {} committed without a reservation", snapshot);
  reserved_.erase(it);
  // The step ran the slot past the prefix's end: its pages before it are full, and the slot writes only after it.
  if (blocks_.position(slot) < static_cast<int64_t>(prefix.size()))
    fail("prompt cache: slot {} at position {} cannot be cached as a prefix of {} tokens", slot, blocks_.position(slot),
         prefix.size());
  const int64_t blocks = static_cast<int64_t>(prefix.size()) / kBlock;
  const std::span<const ImageCacheKey> own = images_before(images, static_cast<int64_t>(prefix.size()));
  const uint64_t key = chain(salt, prefix, blocks, own).back();
  if (Entry* same = find(key, salt, prefix, own)) {  // another sequence of the same step kept it first
    same->used = ++tick_;
    free_snapshots_.push_back(snapshot);
    return false;
  }
  if (decision != nullptr && decision_bytes > max_decision_bytes_) {
    free_snapshots_.push_back(snapshot);
    return false;
  }
  return add(snapshot, key, salt, prefix, own, slot, std::move(decision), decision_bytes);
}

void PromptCache::release(int32_t snapshot) {
  const auto it = std::find(reserved_.begin(), reserved_.end(), snapshot);
  if (it == reserved_.end()) fail("prompt cache: snapshot {} released without a reservation", snapshot);
  reserved_.erase(it);
  free_snapshots_.push_back(snapshot);
}

// Snapshot `snapshot` (holding the prefix's GDN state) becomes the entry of `prefix`, whose pages are the slot's first.
bool PromptCache::add(int32_t snapshot, uint64_t key, uint64_t salt, std::span<const int32_t> prefix,
                      std::span<const ImageCacheKey> own, int32_t slot, std::shared_ptr<PendingDecisionPrefix> decision,
                      size_t decision_bytes) {
  const int64_t blocks = static_cast<int64_t>(prefix.size()) / kBlock;
  const std::vector<int32_t>& table = blocks_.table(slot);
  Entry entry{.key = key,
              .salt = salt,
              .tokens = {prefix.begin(), prefix.end()},
              .images = {own.begin(), own.end()},
              .pages = {table.begin(), table.begin() + blocks},
              .decision = std::move(decision),
              .decision_bytes = decision_bytes,
              .used = ++tick_};
  blocks_.retain(entry.pages);
  return add_entry(snapshot, std::move(entry)) >= 0;
}

// `entry` (its pages referenced once for it) becomes snapshot `snapshot`'s; the oldest entries go to keep within the
// budgets, this one too if it alone is too big. Its snapshot, or -1 when it went.
int32_t PromptCache::add_entry(int32_t snapshot, Entry entry) {
  decision_bytes_held_ += entry.decision_bytes;
  for (int32_t page : entry.pages) ++page_holds_[page];
  index_.emplace(entry.key, snapshot);
  entries_[static_cast<size_t>(snapshot)] = std::move(entry);
  while ((static_cast<int64_t>(page_holds_.size()) > max_pages_ || decision_bytes_held_ > max_decision_bytes_) &&
         evict_one()) {
  }
  return entries_[static_cast<size_t>(snapshot)].has_value() ? snapshot : -1;
}

bool PromptCache::evict_one() {
  int32_t oldest = -1;
  for (size_t s = 0; s < entries_.size(); ++s)
    if (entries_[s] && (oldest < 0 || entries_[s]->used < entries_[static_cast<size_t>(oldest)]->used))
      oldest = static_cast<int32_t>(s);
  if (oldest < 0) return false;
  evict(oldest);
  ++stats_.evictions;
  return true;
}

void PromptCache::evict(int32_t snapshot) {
  Entry& entry = *entries_[static_cast<size_t>(snapshot)];
  // To the host tier, copied before the pages' references go (the copies are ordered before any step that reuses
  // them). A decision's entry is not kept there: its sink's prefix may be device memory.
  // Nor one over the device budget alone (add_entry's): it could never come back.
  if (host_ && entry.decision == nullptr && static_cast<int64_t>(entry.pages.size()) <= max_pages_)
    host_->keep(entry.key, entry.salt, entry.tokens, entry.images, snapshot, entry.pages, entry.used);
  const auto [first, last] = index_.equal_range(entry.key);
  for (auto it = first; it != last; ++it)
    if (it->second == snapshot) {
      index_.erase(it);
      break;
    }
  for (int32_t page : entry.pages)
    if (--page_holds_[page] == 0) page_holds_.erase(page);
  blocks_.drop(entry.pages);
  decision_bytes_held_ -= entry.decision_bytes;
  entries_[static_cast<size_t>(snapshot)].reset();
  free_snapshots_.push_back(snapshot);
}

int64_t PromptCache::reclaimable_pages() const {
  int64_t pages = 0;
  for (const auto& [page, holds] : page_holds_) pages += blocks_.references(page) == holds ? 1 : 0;
  return pages;
}

PromptCache::Stats PromptCache::stats() const {
  Stats out = stats_;
  out.entries = static_cast<int64_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e.has_value(); }));
  out.pages_held = static_cast<int64_t>(page_holds_.size());
  out.decision_bytes_held = decision_bytes_held_;
  if (host_) {
    const HostCacheTier::Stats h = host_->stats();
    out.host_evictions = h.evictions;
    out.host_entries = h.entries;
    out.host_snapshots_held = h.snapshots_held;
    out.host_pages_held = h.pages_held;
  }
  return out;
}

}  // namespace duet::engine
