#pragma once
// A grammar bound to a vocabulary, with each scanning node's context-independent answer for every token (the idea of
// xgrammar's adaptive token mask cache): probing the node alone, with nothing known below it,
//   accepted:  the token's bytes are all consumed inside the node's rule (or it ends exactly where the rule may
//              end), so it is allowed whatever the stack below holds;
//   uncertain: the rule may end partway through the token, and the rest depends on the stack below: checked
//              against the real stack when a mask is made (matcher.cc);
//   rejected:  everything else, whatever the stack below.
// A node's answer is computed the first time a mask needs it and kept (thread-safe), so compiling is quick and a
// request pays once for the nodes it reaches; the grammar cache keeps them for the next request.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/follow_bytes.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace duet::grammar {

struct NodeTokens {
  std::vector<uint32_t> accepted_words;  // dense: a full mask, when many tokens are accepted
  std::vector<int32_t> accepted_ids;     // sparse: the ids, when few are
  std::vector<int32_t> uncertain;        // ranks, ascending (byte order)
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary);
  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  // The node's token answers (a scanning node's), computed on first use.
  const NodeTokens& tokens_at(int32_t node) const;
  // Computes every scanning node's answers now (benchmarks; a server warms lazily).
  void precompute_all() const;
  int32_t scanning_nodes() const;

 private:
  NodeTokens probe(int32_t node) const;

  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::vector<ByteSet> follow_;  // follow_bytes(grammar_)
  mutable std::unique_ptr<std::once_flag[]> once_;
  mutable std::vector<NodeTokens> tokens_;
};

}  // namespace duet::grammar
