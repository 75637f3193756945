#include "grammar/vocabulary.h"

#include <algorithm>

#include "base/error.h"
#include "grammar/terminals.h"
#include "tokenizer/tokenizer.h"

namespace duet::grammar {

Vocabulary::Vocabulary(std::vector<std::pair<int32_t, std::string>> tokens, int32_t width) : width_(width) {
  std::erase_if(tokens, [](const auto& t) { return t.second.empty(); });
  for (const auto& [id, bytes] : tokens)
    if (id < 0 || id >= width) fail("grammar: token id {} outside the mask's {} columns", id, width);
  // Byte order, ties by id: the trie's preorder visits a token's prefixes before it.
  std::sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });
  rank_of_id_.assign(static_cast<size_t>(width), -1);
  trie_.push_back({});
  std::vector<int32_t> path{0};  // path[d]: the trie node at depth d on the current token's path
  for (size_t rank = 0; rank < tokens.size(); ++rank) {
    const auto& [id, bytes] = tokens[rank];
    ids_.push_back(id);
    bytes_.push_back(bytes);
    rank_of_id_[static_cast<size_t>(id)] = static_cast<int32_t>(rank);
    // Keep the part of the path this token shares with the previous one.
    size_t shared = 0;
    if (rank > 0) {
      const std::string& prev = tokens[rank - 1].second;
      while (shared < prev.size() && shared < bytes.size() && prev[shared] == bytes[shared]) ++shared;
    }
    while (path.size() > shared + 1) {
      trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = shared; d < bytes.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(bytes[d]);
      node.depth = static_cast<int32_t>(d + 1);
      node.first_rank = static_cast<int32_t>(rank);
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
    }
    TrieNode& leaf = trie_[static_cast<size_t>(path.back())];
    if (leaf.ranks == 0) leaf.first_rank = static_cast<int32_t>(rank);
    ++leaf.ranks;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

int32_t Vocabulary::rank_of(int32_t id) const {
  if (id < 0 || id >= width_) return -1;
  return rank_of_id_[static_cast<size_t>(id)];
}

bool Vocabulary::has_token(std::string_view bytes) const {
  const auto it = std::lower_bound(bytes_.begin(), bytes_.end(), bytes);
  return it != bytes_.end() && *it == bytes;
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const tokenizer::Tokenizer& tokenizer, int32_t width) {
  std::vector<std::pair<int32_t, std::string>> tokens;
  const int32_t n = std::min(tokenizer.vocab_size(), width);
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_added(id)) continue;
    const std::string* bytes = tokenizer.token_bytes(id);
    if (bytes == nullptr) continue;
    // Byte-level BPE keeps a token for each of the 256 bytes; those UTF-8 never uses spell terminals here.
    if (std::any_of(bytes->begin(), bytes->end(), [](char c) { return never_in_utf8(static_cast<uint8_t>(c)); }))
      continue;
    tokens.emplace_back(id, *bytes);
  }
  for (size_t t = 0; t < kTerminalText.size(); ++t) {
    const auto id = tokenizer.token_to_id(std::string(kTerminalText[t]));
    if (id && *id < width) tokens.emplace_back(*id, std::string(1, static_cast<char>(terminal_byte(Terminal(t)))));
  }
  return std::make_shared<const Vocabulary>(std::move(tokens), width);
}

}  // namespace duet::grammar
