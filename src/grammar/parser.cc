#include "grammar/parser.h"

#include "base/error.h"

namespace duet::grammar {

int32_t StackArena::intern(int32_t node, int32_t parent) {
  auto [it, fresh] = ids_.try_emplace(key(node, parent), static_cast<int32_t>(frames_.size()));
  if (fresh) frames_.push_back({node, parent});
  return it->second;
}

void StackArena::rollback(size_t mark) {
  for (size_t i = mark; i < frames_.size(); ++i) ids_.erase(key(frames_[i].node, frames_[i].parent));
  frames_.resize(mark);
}

bool Parser::first_visit(int32_t stack) {
  if (visited_.size() < arena_.size()) visited_.resize(arena_.size() * 2, 0);
  uint32_t& mark = visited_[static_cast<size_t>(stack)];
  if (mark == epoch_) return false;
  mark = epoch_;
  return true;
}

// Adds `stack` and everything it reaches without a byte: the rules its node calls, and its callers once its rule
// may end. Left recursion is refused when the grammar is built, so the depth is bounded by the grammar's nesting;
// the cap only guards against a grammar built around that check.
void Parser::expand(int32_t stack, ParseState& out, int depth) {
  if (depth > 4096) fail("grammar: expansion deeper than 4096 calls without a byte");
  if (!first_visit(stack)) return;
  const int32_t node = arena_.node(stack);
  const Grammar::Node& n = grammar_.nodes[static_cast<size_t>(node)];
  if (n.scans) out.stacks.push_back(stack);
  const int32_t below = arena_.parent(stack);
  for (const Grammar::Edge& e : grammar_.edges_of(node)) {
    if (e.rule < 0) continue;
    const int32_t caller = arena_.intern(e.target, below);
    expand(arena_.intern(grammar_.rule_start[static_cast<size_t>(e.rule)], caller), out, depth + 1);
  }
  if (n.final) {
    if (below == StackArena::kRoot)
      out.can_end = true;
    else if (below == StackArena::kBottom)
      out.escaped = true;
    else
      expand(below, out, depth + 1);
  }
}

ParseState Parser::start(int32_t rule, int32_t below) {
  ++epoch_;
  ParseState out;
  expand(arena_.intern(grammar_.rule_start[static_cast<size_t>(rule)], below), out, 0);
  return out;
}

ParseState Parser::at(int32_t node, int32_t below) {
  ParseState out;
  out.stacks.push_back(arena_.intern(node, below));
  return out;
}

ParseState Parser::advance(const ParseState& state, uint8_t byte) {
  ParseState out;
  advance(state, byte, out);
  return out;
}

void Parser::advance(const ParseState& state, uint8_t byte, ParseState& out) {
  ++epoch_;
  out.stacks.clear();
  out.can_end = out.escaped = false;
  for (int32_t stack : state.stacks) {
    const int32_t below = arena_.parent(stack);
    for (const Grammar::Edge& e : grammar_.edges_of(arena_.node(stack))) {
      if (e.rule >= 0 || byte < e.lo || byte > e.hi) continue;
      expand(arena_.intern(e.target, below), out, 0);
    }
  }
}

}  // namespace duet::grammar
