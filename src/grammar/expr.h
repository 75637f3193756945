#pragma once
// Rule bodies as expressions (bytes, sequence, choice, bounded repetition, calls), the form the schema and regex
// compilers write; GrammarBuilder turns them into Grammar's per-rule automata.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace duet::grammar {

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  enum class Kind : uint8_t { bytes, call, seq, alt, repeat } kind = Kind::seq;
  uint8_t lo = 0, hi = 0;    // bytes
  int32_t rule = -1;         // call
  std::vector<Expr> parts;   // seq, alt; repeat: parts[0]
  int32_t min = 0, max = 0;  // repeat: max < 0 is unbounded
};

Expr byte_range(uint8_t lo, uint8_t hi);
Expr byte_of(uint8_t b);
Expr literal(std::string_view text);  // its bytes in order; empty text matches the empty string
Expr call(int32_t rule);
Expr seq(std::vector<Expr> parts);
Expr alt(std::vector<Expr> parts);                 // no parts: matches nothing
Expr repeat(Expr part, int32_t min, int32_t max);  // max < 0: unbounded
inline Expr optional(Expr part) { return repeat(std::move(part), 0, 1); }
inline Expr star(Expr part) { return repeat(std::move(part), 0, -1); }
inline Expr empty() { return seq({}); }
inline Expr nothing() { return alt({}); }

}  // namespace duet::grammar
