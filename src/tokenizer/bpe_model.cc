#include "tokenizer/bpe_model.h"

#include <limits>
#include <queue>

namespace duet::tokenizer {

void MergeTable::reserve(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity <<= 1;
  slots_.assign(capacity, Entry{});
  mask_ = capacity - 1;
  size_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key || e.key == kEmpty) {
      if (e.key == kEmpty) ++size_;
      e = Entry{key, rank, merged};
      return;
    }
  }
}

BpeModel::BpeModel(std::vector<std::string> token_bytes, std::vector<bool> has_bytes,
                   const std::vector<std::array<int32_t, 3>>& merges, bool ignore_merges)
    : ignore_merges_(ignore_merges) {
  byte_ids_.fill(-1);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!has_bytes[id]) continue;
    if (token_bytes[id].size() == 1) byte_ids_[static_cast<uint8_t>(token_bytes[id][0])] = int32_t(id);
    if (ignore_merges_) whole_words_.emplace(token_bytes[id], int32_t(id));
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    merges_.insert(merges[rank][0], merges[rank][1], uint32_t(rank), merges[rank][2]);
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto it = whole_words_.find(std::string(word)); it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1) {  // one byte: no merge can apply, and no cache is faster than the table
    if (int32_t id = byte_ids_[static_cast<uint8_t>(word[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    merge(word, out);
    return;
  }
  Shard& shard = cache_[std::hash<std::string_view>{}(word) % kShards];
  {
    std::lock_guard lock(shard.mutex);
    if (auto it = shard.words.find(word); it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge(word, out);
  std::vector<int32_t> ids(out.begin() + std::ptrdiff_t(first), out.end());
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() >= kShardCapacity) shard.words.clear();
  shard.words.emplace(std::string(word), std::move(ids));
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) const {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    if (int32_t id = byte_ids_[static_cast<uint8_t>(c)]; id >= 0) symbols.push_back(id);
  }
  if (symbols.size() > 64) {
    merge_long(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
    return;
  }
  // Short words: keep the rank of every adjacent pair; each step merges the leftmost lowest rank and
  // recomputes only the two pairs that changed.
  std::vector<uint32_t> ranks(symbols.size(), kNone);
  std::vector<int32_t> merged(symbols.size(), 0);
  auto look = [&](size_t i) {
    const MergeTable::Entry* e = merges_.find(symbols[i], symbols[i + 1]);
    ranks[i] = e ? e->rank : kNone;
    merged[i] = e ? e->merged : 0;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) look(i);
  while (symbols.size() > 1) {
    size_t best = 0;
    uint32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNone) break;
    symbols[best] = merged[best];
    symbols.erase(symbols.begin() + std::ptrdiff_t(best) + 1);
    ranks.erase(ranks.begin() + std::ptrdiff_t(best) + 1);
    merged.erase(merged.begin() + std::ptrdiff_t(best) + 1);
    if (best + 1 < symbols.size())
      look(best);
    else
      ranks[best] = kNone;
    if (best > 0) look(best - 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::merge_long(std::vector<int32_t>& symbols) const {
  // Long words (a 50 KB run of CJK letters is one word): a min-heap of candidate merges ordered by
  // (rank, position) over a linked list, as tokenizers' Word::merge_all does, so the cost is n log n.
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeTable::Entry* e = merges_.find(symbols[i], symbols[next[i]])) {
      heap.push({e->rank, uint32_t(i), symbols[i], symbols[next[i]], e->merged});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t i = int32_t(c.pos);
    const int32_t j = next[i];
    // Stale entries: one side was merged away or changed since this candidate was pushed.
    if (!alive[i] || j < 0 || symbols[i] != c.left || symbols[j] != c.right) continue;
    symbols[i] = c.merged;
    alive[j] = false;
    next[i] = next[j];
    if (next[i] >= 0) prev[next[i]] = i;
    push(prev[i]);
    push(i);
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[w++] = symbols[i];
  }
  symbols.resize(w);
}

}  // namespace duet::tokenizer
