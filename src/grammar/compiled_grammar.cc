#include "grammar/compiled_grammar.h"

#include "grammar/parser.h"
#include "grammar/token_mask.h"

namespace duet::grammar {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      follow_(follow_bytes(grammar_)),
      once_(std::make_unique<std::once_flag[]>(grammar_.nodes.size())),
      tokens_(grammar_.nodes.size()) {}

const NodeTokens& CompiledGrammar::tokens_at(int32_t node) const {
  const auto i = static_cast<size_t>(node);
  std::call_once(once_[i], [&] { tokens_[i] = probe(node); });
  return tokens_[i];
}

void CompiledGrammar::precompute_all() const {
  for (size_t n = 0; n < grammar_.nodes.size(); ++n)
    if (grammar_.nodes[n].scans) tokens_at(static_cast<int32_t>(n));
}

int32_t CompiledGrammar::scanning_nodes() const {
  int32_t count = 0;
  for (const Grammar::Node& n : grammar_.nodes) count += n.scans ? 1 : 0;
  return count;
}

// One walk over the vocabulary trie from the node alone (kBottom below it). states[d] is the parse state after the
// first d bytes of the current trie path; open[d] says whether the rule could have ended at some depth k < d on it
// with byte k + 1 one that can follow the rule (follow_bytes.h): only then can the stack below decide the token.
NodeTokens CompiledGrammar::probe(int32_t node) const {
  const Vocabulary& v = *vocabulary_;
  const auto& trie = v.trie();
  const ByteSet& follow = follow_[static_cast<size_t>(node)];
  StackArena arena;
  Parser parser(grammar_, arena);
  std::vector<ParseState> states{parser.at(node, StackArena::kBottom)};
  std::vector<bool> open{false};
  std::vector<int32_t> accepted;
  NodeTokens out;
  auto mark_subtree_uncertain = [&](size_t begin, size_t end) {  // every token in trie nodes [begin, end)
    for (size_t j = begin; j < end; ++j)
      for (int32_t r = 0; r < trie[j].ranks; ++r) out.uncertain.push_back(trie[j].first_rank + r);
  };
  size_t i = 1;
  while (i < trie.size()) {
    const Vocabulary::TrieNode& t = trie[i];
    const auto d = static_cast<size_t>(t.depth);
    if (states.size() <= d) states.resize(d + 1);  // never shrunk: each depth keeps its memory
    open.resize(d + 1);
    parser.advance(states[d - 1], t.byte, states[d]);
    open[d] = open[d - 1] || (states[d - 1].escaped && follow.test(t.byte));
    const bool inside = !states[d].stacks.empty();
    for (int32_t r = 0; r < t.ranks; ++r) {
      if (inside || states[d].escaped)
        accepted.push_back(v.id(t.first_rank + r));
      else if (open[d])
        out.uncertain.push_back(t.first_rank + r);
    }
    if (!inside) {  // no byte more is taken inside the rule: the subtree is uncertain or rejected as a whole
      const auto end = static_cast<size_t>(t.end);
      if (open[d]) {
        mark_subtree_uncertain(i + 1, end);
      } else if (states[d].escaped) {  // the children whose byte can follow the rule
        for (size_t j = i + 1; j < end; j = static_cast<size_t>(trie[j].end))
          if (follow.test(trie[j].byte)) mark_subtree_uncertain(j, static_cast<size_t>(trie[j].end));
      }
      i = end;
      continue;
    }
    ++i;
  }
  // Sparse below one id per mask word: OR-ing the ids then costs no more than OR-ing the words.
  if (accepted.size() > static_cast<size_t>(v.words())) {
    out.accepted_words.assign(static_cast<size_t>(v.words()), 0);
    for (int32_t id : accepted) set_bit(out.accepted_words, id);
  } else {
    out.accepted_ids = std::move(accepted);
  }
  return out;
}

}  // namespace duet::grammar
