#pragma once
// A tokenizer's vocabulary as the grammar sees it, built once per tokenizer: every usable token's bytes, sorted into
// a trie kept in preorder (node i's subtree is [i, end)), so a walk over all tokens shares their common prefixes and
// skips a whole subtree when its prefix is rejected.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace duet::tokenizer {
class Tokenizer;
}

namespace duet::grammar {

class Vocabulary {
 public:
  struct TrieNode {
    uint8_t byte = 0;        // the byte that leads here from the parent (none for the root)
    int32_t depth = 0;       // bytes from the root
    int32_t end = 0;         // one past the last node of this subtree
    int32_t first_rank = 0;  // the tokens ending here: ranks [first_rank, first_rank + ranks)
    int32_t ranks = 0;
  };

  // Tokens as (id, bytes); ids must be below `width`, the mask's columns (the model's logits, which may have more
  // columns than the tokenizer has tokens). Tokens with no bytes are left out.
  Vocabulary(std::vector<std::pair<int32_t, std::string>> tokens, int32_t width);
  // Every token of `tokenizer` with bytes that is not an added token (special or not: "<think>", "<tool_call>"
  // mean something to the server, so they never appear inside a constrained document) and holds no byte UTF-8 text
  // never contains; plus the added tokens of kTerminalText, each spelled by its terminal byte (terminals.h).
  static std::shared_ptr<const Vocabulary> from_tokenizer(const tokenizer::Tokenizer& tokenizer, int32_t width);

  int32_t width() const { return width_; }
  int32_t words() const { return (width_ + 31) / 32; }  // uint32 words of a mask
  const std::vector<TrieNode>& trie() const { return trie_; }
  // Rank: a token's place in byte order (= trie preorder). Id and bytes by rank.
  int32_t tokens() const { return static_cast<int32_t>(ids_.size()); }
  int32_t id(int32_t rank) const { return ids_[static_cast<size_t>(rank)]; }
  const std::string& bytes(int32_t rank) const { return bytes_[static_cast<size_t>(rank)]; }
  // The rank of an id, or -1 when the id is not a usable token.
  int32_t rank_of(int32_t id) const;
  // Whether the token spelled by `bytes` is in the vocabulary (a terminal's byte: whether the tokenizer has it).
  bool has_token(std::string_view bytes) const;

 private:
  int32_t width_;
  std::vector<int32_t> ids_;
  std::vector<std::string> bytes_;
  std::vector<int32_t> rank_of_id_;
  std::vector<TrieNode> trie_;
};

}  // namespace duet::grammar
