#pragma once
// A grammar over bytes, compiled to one small automaton per rule (the design xgrammar and llguidance publish: a
// pushdown automaton whose stack holds return points into rules). A node is a position inside a rule; its edges
// either consume one byte in [lo, hi] or call a rule (push: run the callee, then continue at `target`). A final node
// may return to its caller. Nodes are epsilon-free, so a parser moves between them only by bytes, calls and returns.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace duet::grammar {

struct Grammar {
  struct Edge {
    uint8_t lo = 0, hi = 0;  // a byte edge consumes one byte in [lo, hi]
    int32_t rule = -1;       // >= 0: a call of that rule instead of a byte
    int32_t target = 0;      // the node the edge leads to (for a call: where the caller continues)
  };
  struct Node {
    int32_t first_edge = 0;
    int32_t edge_count = 0;
    bool final = false;  // the rule may end here
    bool scans = false;  // it has at least one byte edge
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  std::vector<int32_t> rule_start;  // rule -> its first node
  std::vector<std::string> rule_names;
  int32_t root = 0;  // the rule a document is

  std::span<const Edge> edges_of(int32_t node) const {
    const Node& n = nodes[static_cast<size_t>(node)];
    return {edges.data() + n.first_edge, static_cast<size_t>(n.edge_count)};
  }
};

}  // namespace duet::grammar
