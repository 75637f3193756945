#include "grammar/matcher.h"

#include <algorithm>

#include "grammar/token_mask.h"

namespace duet::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), parser_(grammar_->grammar(), arena_) {
  state_ = parser_.start(grammar_->grammar().root, StackArena::kRoot);
}

size_t Matcher::walk(std::string_view bytes, size_t from) {
  // states_[0, depth_] are valid; deeper entries keep their memory for the next walk.
  for (size_t d = from; d < bytes.size(); ++d) {
    if (states_.size() <= d + 1) states_.resize(d + 2);
    ParseState& next = states_[d + 1];
    parser_.advance(states_[d], static_cast<uint8_t>(bytes[d]), next);
    depth_ = d;
    if (next.stacks.empty() && !next.can_end) return d;
    depth_ = d + 1;
    if (next.stacks.empty() && d + 1 < bytes.size()) return d + 1;  // the document ended before the token did
  }
  return bytes.size();
}

void Matcher::fill_mask(std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  const Vocabulary& v = grammar_->vocabulary();
  uncertain_.clear();
  for (int32_t stack : state_.stacks) {
    const NodeTokens& t = grammar_->tokens_at(arena_.node(stack));
    if (!t.accepted_words.empty())
      for (size_t w = 0; w < words.size(); ++w) words[w] |= t.accepted_words[w];
    for (int32_t id : t.accepted_ids) set_bit(words, id);
    uncertain_.insert(uncertain_.end(), t.uncertain.begin(), t.uncertain.end());
  }
  if (uncertain_.empty()) return;
  if (state_.stacks.size() > 1) {
    std::sort(uncertain_.begin(), uncertain_.end());
    uncertain_.erase(std::unique(uncertain_.begin(), uncertain_.end()), uncertain_.end());
  }
  // Check each against the real stacks, in byte order: a token resumes from the prefix it shares with the previous
  // one, and a prefix that failed rules out the tokens after it that share it.
  const size_t mark = arena_.size();
  start_walks();
  std::string_view previous;
  size_t failed_at = std::string_view::npos;  // depth of the previous token's failing byte
  for (int32_t rank : uncertain_) {
    const int32_t id = v.id(rank);
    if (test_bit(words, id)) continue;
    const std::string_view bytes = v.bytes(rank);
    size_t shared = 0;
    while (shared < previous.size() && shared < bytes.size() && previous[shared] == bytes[shared]) ++shared;
    previous = bytes;
    if (failed_at != std::string_view::npos && shared > failed_at) continue;  // same failing prefix
    const size_t from = std::min(shared, depth_);
    const size_t reached = walk(bytes, from);
    failed_at = reached == bytes.size() ? std::string_view::npos : reached;
    if (reached == bytes.size()) set_bit(words, id);
  }
  arena_.rollback(mark);
}

void Matcher::start_walks() {
  if (states_.empty()) states_.resize(1);
  states_[0] = state_;
  depth_ = 0;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  const size_t mark = arena_.size();
  start_walks();
  const bool fits = walk(bytes, 0) == bytes.size();
  if (fits) {
    state_ = states_[bytes.size()];
  } else {
    arena_.rollback(mark);
  }
  return fits;
}

bool Matcher::allows(int32_t id) {
  const Vocabulary& v = grammar_->vocabulary();
  const int32_t rank = v.rank_of(id);
  if (rank < 0) return false;
  const size_t mark = arena_.size();
  start_walks();
  const std::string& bytes = v.bytes(rank);
  const bool fits = walk(bytes, 0) == bytes.size();
  arena_.rollback(mark);
  return fits;
}

bool Matcher::accept_token(int32_t id) {
  const Vocabulary& v = grammar_->vocabulary();
  const int32_t rank = v.rank_of(id);
  return rank >= 0 && accept_bytes(v.bytes(rank));
}

}  // namespace duet::grammar
