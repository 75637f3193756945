#include "grammar/grammar_builder.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "base/error.h"

namespace duet::grammar {

namespace {

// One rule's Thompson automaton: epsilon edges and symbol edges (a byte range or a call) between local states.
struct Thompson {
  struct Symbol {
    uint8_t lo, hi;
    int32_t rule;
    int32_t to;
  };
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<Symbol>> sym;

  int32_t state() {
    eps.emplace_back();
    sym.emplace_back();
    return static_cast<int32_t>(eps.size()) - 1;
  }
  void link(int32_t from, int32_t to) { eps[static_cast<size_t>(from)].push_back(to); }

  // Adds `e` starting at `from`; returns the state where it ends. Every part starts from a fresh state reached by an
  // epsilon edge, so loops never share a state with what follows them.
  int32_t add(const Expr& e, int32_t from) {
    switch (e->kind) {
      case ExprNode::Kind::bytes:
      case ExprNode::Kind::call: {
        const int32_t to = state();
        sym[static_cast<size_t>(from)].push_back({e->lo, e->hi, e->kind == ExprNode::Kind::call ? e->rule : -1, to});
        return to;
      }
      case ExprNode::Kind::seq: {
        int32_t at = from;
        for (const Expr& part : e->parts) at = add(part, at);
        return at;
      }
      case ExprNode::Kind::alt: {
        const int32_t end = state();
        for (const Expr& part : e->parts) {
          const int32_t start = state();
          link(from, start);
          link(add(part, start), end);
        }
        return end;
      }
      case ExprNode::Kind::repeat: {
        int32_t at = from;
        for (int32_t i = 0; i < e->min; ++i) {
          const int32_t start = state();
          link(at, start);
          at = add(e->parts[0], start);
        }
        if (e->max < 0) {  // at -> loop; loop -> part -> loop; loop is the exit
          const int32_t loop = state();
          link(at, loop);
          const int32_t start = state();
          link(loop, start);
          link(add(e->parts[0], start), loop);
          return loop;
        }
        // Each further copy may be skipped, and skipping one ends the repetition (x(x(x)?)?)?: the copy a parser
        // stands in is the number of copies written, so the automaton stays deterministic where x is.
        const int32_t exit = state();
        for (int32_t i = e->min; i < e->max; ++i) {
          link(at, exit);
          const int32_t start = state();
          link(at, start);
          at = add(e->parts[0], start);
        }
        link(at, exit);
        return exit;
      }
    }
    return from;
  }

  std::vector<int32_t> closure(int32_t q) const {
    std::vector<int32_t> out{q};
    std::vector<bool> seen(eps.size());
    seen[static_cast<size_t>(q)] = true;
    for (size_t i = 0; i < out.size(); ++i)
      for (int32_t next : eps[static_cast<size_t>(out[i])])
        if (!seen[static_cast<size_t>(next)]) {
          seen[static_cast<size_t>(next)] = true;
          out.push_back(next);
        }
    return out;
  }
};

// Merges nodes with the same future: equal `final` and equal edges (targets compared after merging), repeated until
// nothing changes. The ends of a repetition's copies, or of two uses of one expression, become one node.
void merge_equivalent_nodes(Grammar& g) {
  const size_t n = g.nodes.size();
  std::vector<int32_t> rep(n);
  for (size_t i = 0; i < n; ++i) rep[i] = static_cast<int32_t>(i);
  const auto find = [&](int32_t x) {
    while (rep[static_cast<size_t>(x)] != x) x = rep[static_cast<size_t>(x)];
    return x;
  };
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::pair<bool, std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t>>>, int32_t> seen;
    for (size_t i = 0; i < n; ++i) {
      if (rep[i] != static_cast<int32_t>(i)) continue;
      std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t>> sig;
      for (const Grammar::Edge& e : g.edges_of(static_cast<int32_t>(i)))
        sig.emplace_back(e.rule, e.lo, e.hi, find(e.target));
      std::sort(sig.begin(), sig.end());
      sig.erase(std::unique(sig.begin(), sig.end()), sig.end());
      auto [it, fresh] = seen.emplace(std::make_pair(g.nodes[i].final, std::move(sig)), static_cast<int32_t>(i));
      if (!fresh) {
        rep[i] = it->second;
        changed = true;
      }
    }
  }
  std::vector<int32_t> index(n, -1);
  Grammar out;
  out.root = g.root;
  out.rule_names = g.rule_names;
  for (size_t i = 0; i < n; ++i)
    if (find(static_cast<int32_t>(i)) == static_cast<int32_t>(i)) {
      index[i] = static_cast<int32_t>(out.nodes.size());
      out.nodes.push_back(g.nodes[i]);
    }
  for (size_t i = 0, k = 0; i < n; ++i) {
    if (index[i] < 0) continue;
    Grammar::Node& node = out.nodes[k++];
    std::vector<Grammar::Edge> edges;
    for (Grammar::Edge e : g.edges_of(static_cast<int32_t>(i))) {
      e.target = index[static_cast<size_t>(find(e.target))];
      edges.push_back(e);
    }
    std::sort(edges.begin(), edges.end(), [](const Grammar::Edge& a, const Grammar::Edge& b) {
      return std::tie(a.rule, a.lo, a.hi, a.target) < std::tie(b.rule, b.lo, b.hi, b.target);
    });
    edges.erase(std::unique(edges.begin(), edges.end(),
                            [](const Grammar::Edge& a, const Grammar::Edge& b) {
                              return a.rule == b.rule && a.lo == b.lo && a.hi == b.hi && a.target == b.target;
                            }),
                edges.end());
    node.first_edge = static_cast<int32_t>(out.edges.size());
    node.edge_count = static_cast<int32_t>(edges.size());
    out.edges.insert(out.edges.end(), edges.begin(), edges.end());
  }
  for (int32_t start : g.rule_start) out.rule_start.push_back(index[static_cast<size_t>(find(start))]);
  g = std::move(out);
}

}  // namespace

int32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(nullptr);
  return static_cast<int32_t>(bodies_.size()) - 1;
}

void GrammarBuilder::define(int32_t rule, Expr body) { bodies_[static_cast<size_t>(rule)] = std::move(body); }

Grammar GrammarBuilder::build(int32_t root) const {
  Grammar g;
  g.root = root;
  g.rule_names = names_;
  g.rule_start.resize(bodies_.size());
  for (size_t r = 0; r < bodies_.size(); ++r) {
    if (!bodies_[r]) fail("grammar: rule {} is used but never defined", names_[r]);
    Thompson t;
    const int32_t start = t.state();
    const int32_t accept = t.add(bodies_[r], start);
    // Epsilon-free nodes: the start and every state a symbol edge enters, each standing for its closure. States with
    // the same closure are one node (the ends of a choice's branches all continue alike), so a rule has as few nodes
    // as its distinct futures need, and each node's token answers are computed once.
    std::map<std::vector<int32_t>, int32_t> node_of;
    std::vector<std::vector<int32_t>> todo;
    auto node_for = [&](int32_t q) {
      std::vector<int32_t> closure = t.closure(q);
      std::sort(closure.begin(), closure.end());
      auto [it, fresh] = node_of.emplace(closure, static_cast<int32_t>(g.nodes.size()));
      if (fresh) {
        g.nodes.emplace_back();
        todo.push_back(std::move(closure));
      }
      return it->second;
    };
    g.rule_start[r] = node_for(start);
    while (!todo.empty()) {
      const std::vector<int32_t> closure = std::move(todo.back());
      todo.pop_back();
      const int32_t node = node_of[closure];
      std::vector<Grammar::Edge> edges;
      bool final = false;
      for (int32_t c : closure) {
        final = final || c == accept;
        for (const Thompson::Symbol& s : t.sym[static_cast<size_t>(c)])
          edges.push_back({s.lo, s.hi, s.rule, node_for(s.to)});
      }
      std::sort(edges.begin(), edges.end(), [](const Grammar::Edge& a, const Grammar::Edge& b) {
        return std::tie(a.rule, a.lo, a.hi, a.target) < std::tie(b.rule, b.lo, b.hi, b.target);
      });
      edges.erase(std::unique(edges.begin(), edges.end(),
                              [](const Grammar::Edge& a, const Grammar::Edge& b) {
                                return a.rule == b.rule && a.lo == b.lo && a.hi == b.hi && a.target == b.target;
                              }),
                  edges.end());
      Grammar::Node& n = g.nodes[static_cast<size_t>(node)];
      n.first_edge = static_cast<int32_t>(g.edges.size());
      n.edge_count = static_cast<int32_t>(edges.size());
      n.final = final;
      n.scans = std::any_of(edges.begin(), edges.end(), [](const Grammar::Edge& e) { return e.rule < 0; });
      g.edges.insert(g.edges.end(), edges.begin(), edges.end());
    }
  }

  merge_equivalent_nodes(g);

  // Left recursion: a rule that reaches a call of itself through nodes entered only by calls of nullable rules.
  std::vector<bool> nullable(bodies_.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < bodies_.size(); ++r) {
      if (nullable[r]) continue;
      std::vector<int32_t> stack{g.rule_start[r]};
      std::vector<bool> seen(g.nodes.size());
      while (!stack.empty() && !nullable[r]) {
        const int32_t n = stack.back();
        stack.pop_back();
        if (seen[static_cast<size_t>(n)]) continue;
        seen[static_cast<size_t>(n)] = true;
        if (g.nodes[static_cast<size_t>(n)].final) nullable[r] = changed = true;
        for (const Grammar::Edge& e : g.edges_of(n))
          if (e.rule >= 0 && nullable[static_cast<size_t>(e.rule)]) stack.push_back(e.target);
      }
    }
  }
  for (size_t r = 0; r < bodies_.size(); ++r) {
    // Rules callable from r's start without consuming a byte; r among them is left recursion.
    std::vector<int32_t> stack{g.rule_start[r]};
    std::vector<bool> seen(g.nodes.size());
    while (!stack.empty()) {
      const int32_t n = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(n)]) continue;
      seen[static_cast<size_t>(n)] = true;
      for (const Grammar::Edge& e : g.edges_of(n)) {
        if (e.rule < 0) continue;
        if (static_cast<size_t>(e.rule) == r) fail("grammar: rule {} calls itself before consuming input", names_[r]);
        stack.push_back(g.rule_start[static_cast<size_t>(e.rule)]);
        if (nullable[static_cast<size_t>(e.rule)]) stack.push_back(e.target);
      }
    }
  }
  return g;
}

}  // namespace duet::grammar
