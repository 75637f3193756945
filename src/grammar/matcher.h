#pragma once
// One constrained sequence's place in its grammar: the mask of tokens that keep the document valid, and the state
// after each token the sampler picked. Not shared between sequences (its stack arena is its own); the compiled
// grammar it reads is, and is immutable apart from its lazily filled node answers.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "grammar/compiled_grammar.h"
#include "grammar/parser.h"

namespace duet::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Sets exactly the bits of the tokens whose bytes can come next (words: vocabulary().words() of them, zeroed
  // here). The end of the document is not a token: when can_end(), the caller allows its stop tokens too.
  void fill_mask(std::span<uint32_t> words);
  // Whether the document is complete here (a stop token may come).
  bool can_end() const { return state_.can_end; }
  // Whether nothing but the end may come.
  bool must_end() const { return state_.stacks.empty(); }
  // Takes the token's bytes; false, leaving the state as it was, when they do not fit the grammar (or the id is not
  // a usable token).
  bool accept_token(int32_t id);
  bool accept_bytes(std::string_view bytes);
  // Whether accept_token(id) would succeed, leaving the state as it is (the slow, one-token-at-a-time check the
  // tests compare fill_mask with).
  bool allows(int32_t id);
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  // Whether `bytes` [from, size) fit after states_[from] (filled to `from`); grows states_ along the way, so the
  // next token can resume from the prefix it shares with this one. Returns the depth of the first byte that failed
  // or bytes.size() when it fit.
  size_t walk(std::string_view bytes, size_t from);
  void start_walks();  // states_[0] = state_, depth_ = 0

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  Parser parser_;
  ParseState state_;
  std::vector<ParseState> states_;  // a walk's states by depth (states_[0] = state_), valid up to depth_
  size_t depth_ = 0;
  std::vector<int32_t> uncertain_;  // scratch: ranks to check
};

}  // namespace duet::grammar
