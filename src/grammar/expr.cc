#include "grammar/expr.h"

namespace duet::grammar {

namespace {
Expr make(ExprNode node) { return std::make_shared<const ExprNode>(std::move(node)); }
}  // namespace

Expr byte_range(uint8_t lo, uint8_t hi) {
  ExprNode node;
  node.kind = ExprNode::Kind::bytes;
  node.lo = lo;
  node.hi = hi;
  return make(std::move(node));
}
Expr byte_of(uint8_t b) { return byte_range(b, b); }

Expr literal(std::string_view text) {
  std::vector<Expr> parts;
  for (char c : text) parts.push_back(byte_of(static_cast<uint8_t>(c)));
  return parts.size() == 1 ? parts[0] : seq(std::move(parts));
}

Expr call(int32_t rule) {
  ExprNode node;
  node.kind = ExprNode::Kind::call;
  node.rule = rule;
  return make(std::move(node));
}
Expr seq(std::vector<Expr> parts) { return make({.kind = ExprNode::Kind::seq, .parts = std::move(parts)}); }
Expr alt(std::vector<Expr> parts) { return make({.kind = ExprNode::Kind::alt, .parts = std::move(parts)}); }

Expr repeat(Expr part, int32_t min, int32_t max) {
  return make({.kind = ExprNode::Kind::repeat, .parts = {std::move(part)}, .min = min, .max = max});
}

}  // namespace duet::grammar
