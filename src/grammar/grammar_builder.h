#pragma once
// Builds a Grammar from rules written as expressions: declare a rule (so rules can call each other, recursively),
// define its body, then build. Each body becomes a Thompson automaton and then an epsilon-free one, so every node a
// parser stands on is reached by a byte or a call.
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/expr.h"
#include "grammar/grammar.h"

namespace duet::grammar {

class GrammarBuilder {
 public:
  int32_t declare(std::string name);
  void define(int32_t rule, Expr body);
  bool defined(int32_t rule) const { return bodies_[static_cast<size_t>(rule)] != nullptr; }
  int32_t rules() const { return static_cast<int32_t>(bodies_.size()); }
  // Throws duet::Error when a rule was declared and never defined, or when a rule can call itself without
  // consuming a byte first (left recursion: a parser would never stop expanding it).
  Grammar build(int32_t root) const;

 private:
  std::vector<std::string> names_;
  std::vector<Expr> bodies_;
};

}  // namespace duet::grammar
