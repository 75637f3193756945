#include "grammar/follow_bytes.h"

namespace duet::grammar {

std::vector<ByteSet> follow_bytes(const Grammar& g) {
  const size_t nodes = g.nodes.size(), rules = g.rule_start.size();
  // first[n]: bytes a parser standing at n can consume first; ends[n]: it can return from its rule consuming none.
  std::vector<ByteSet> first(nodes);
  std::vector<bool> ends(nodes);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < nodes; ++n) {
      ByteSet f = first[n];
      bool e = ends[n] || g.nodes[n].final;
      for (const Grammar::Edge& edge : g.edges_of(static_cast<int32_t>(n))) {
        if (edge.rule < 0) {
          for (int b = edge.lo; b <= edge.hi; ++b) f.set(static_cast<size_t>(b));
          continue;
        }
        const auto start = static_cast<size_t>(g.rule_start[static_cast<size_t>(edge.rule)]);
        f |= first[start];
        if (ends[start]) {  // a callee that may consume nothing: what follows the call comes first
          f |= first[static_cast<size_t>(edge.target)];
          e = e || ends[static_cast<size_t>(edge.target)];
        }
      }
      if (f != first[n] || e != ends[n]) {
        first[n] = f;
        ends[n] = e;
        changed = true;
      }
    }
  }
  // The rules each node belongs to: reached from the rule's start by byte edges and call continuations.
  std::vector<std::vector<int32_t>> rules_of(nodes);
  for (size_t r = 0; r < rules; ++r) {
    std::vector<bool> seen(nodes);
    std::vector<int32_t> todo{g.rule_start[r]};
    while (!todo.empty()) {
      const int32_t n = todo.back();
      todo.pop_back();
      if (seen[static_cast<size_t>(n)]) continue;
      seen[static_cast<size_t>(n)] = true;
      rules_of[static_cast<size_t>(n)].push_back(static_cast<int32_t>(r));
      for (const Grammar::Edge& edge : g.edges_of(n)) todo.push_back(edge.target);
    }
  }
  // follow[r]: what comes after each call of r; a call's continuation that may end its own rule adds that rule's.
  std::vector<ByteSet> follow_rule(rules);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < nodes; ++n) {
      for (const Grammar::Edge& edge : g.edges_of(static_cast<int32_t>(n))) {
        if (edge.rule < 0) continue;
        ByteSet f = follow_rule[static_cast<size_t>(edge.rule)] | first[static_cast<size_t>(edge.target)];
        if (ends[static_cast<size_t>(edge.target)])
          for (int32_t caller : rules_of[n]) f |= follow_rule[static_cast<size_t>(caller)];
        if (f != follow_rule[static_cast<size_t>(edge.rule)]) {
          follow_rule[static_cast<size_t>(edge.rule)] = f;
          changed = true;
        }
      }
    }
  }
  std::vector<ByteSet> out(nodes);
  for (size_t n = 0; n < nodes; ++n)
    for (int32_t r : rules_of[n]) out[n] |= follow_rule[static_cast<size_t>(r)];
  return out;
}

}  // namespace duet::grammar
