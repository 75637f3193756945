#pragma once
// Byte-level BPE: merges applied by rank to the bytes of one pre-tokenized word, as HF tokenizers' BPE model
// does (always the lowest-ranked adjacent pair, the leftmost one on ties), with a thread-safe word cache.
// It works on raw bytes; the vocabulary's byte-level spellings are decoded once at load.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace duet::tokenizer {

// (left id, right id) -> (rank, merged id), open addressing: the hot lookup of encoding.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n);
  // A later duplicate replaces an earlier one, as tokenizers' HashMap collect does.
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // `token_bytes[id]`: the bytes of each vocabulary id (nullopt-like: `has_bytes[id]` false when the
  // token is not byte-level and so cannot come out of BPE). `merges`: (left id, right id, merged id) in
  // rank order.
  BpeModel(std::vector<std::string> token_bytes, std::vector<bool> has_bytes,
           const std::vector<std::array<int32_t, 3>>& merges, bool ignore_merges);

  // Appends the ids of one word (raw bytes). Bytes whose single-byte token is missing from the vocabulary
  // are dropped, as tokenizers does for a BPE without unk_token.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  std::array<int32_t, 256> byte_ids_{};
  MergeTable merges_;
  bool ignore_merges_;
  std::unordered_map<std::string, int32_t> whole_words_;  // bytes -> id, only for ignore_merges

  // Words -> ids. Sharded so concurrent encodes rarely contend; a full shard is cleared (bounded memory).
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 8192;
  static constexpr size_t kMaxCachedWord = 256;
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace duet::tokenizer
