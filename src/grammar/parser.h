#pragma once
// Running a Grammar on bytes: a parser state is the set of stacks the input so far can have left (the grammar may be
// ambiguous: anyOf branches that share a prefix). A stack is a chain of frames in a StackArena: the top frame is
// the node the parser stands on, each frame below it the node its caller continues at. Frames are interned, so
// equal stacks are one id and a set of stacks dedupes by id.
//
// Stacks in a ParseState always stand on scanning nodes (nodes with byte edges): calls are entered and finished
// rules returned from as soon as a byte is consumed (expand), so the next byte needs only the top frames' edges.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace duet::grammar {

class StackArena {
 public:
  static constexpr int32_t kRoot = -1;    // below the root rule: returning here ends the document
  static constexpr int32_t kBottom = -2;  // below a context-free probe (token_cache.cc): what lies here is unknown

  int32_t intern(int32_t node, int32_t parent);
  int32_t node(int32_t stack) const { return frames_[static_cast<size_t>(stack)].node; }
  int32_t parent(int32_t stack) const { return frames_[static_cast<size_t>(stack)].parent; }
  size_t size() const { return frames_.size(); }
  // Forgets every frame interned after `mark` (= size() then): a probe's frames, once its answer is known.
  void rollback(size_t mark);

 private:
  struct Frame {
    int32_t node;
    int32_t parent;
  };
  static uint64_t key(int32_t node, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(parent);
  }
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> ids_;
};

struct ParseState {
  std::vector<int32_t> stacks;  // on scanning nodes, each once
  bool can_end = false;         // the root rule may return here: the document may end
  bool escaped = false;         // a probe returned below kBottom: what follows depends on the unknown context
  bool alive() const { return !stacks.empty() || can_end || escaped; }
};

class Parser {
 public:
  Parser(const Grammar& grammar, StackArena& arena) : grammar_(grammar), arena_(arena) {}
  // The state before any byte of rule `rule` called with `below` underneath (kRoot for a document).
  ParseState start(int32_t rule, int32_t below);
  // The state standing exactly on `node` above `below`, nothing expanded: a probe of that node's byte edges.
  ParseState at(int32_t node, int32_t below);
  // After one more byte; stacks that cannot take it are gone (an empty state rejects the input).
  ParseState advance(const ParseState& state, uint8_t byte);
  // The same into `out` (reusing its memory: the vocabulary walks call this a million times).
  void advance(const ParseState& state, uint8_t byte, ParseState& out);

 private:
  void expand(int32_t stack, ParseState& out, int depth);
  bool first_visit(int32_t stack);

  const Grammar& grammar_;
  StackArena& arena_;
  std::vector<uint32_t> visited_;  // visited_[stack] == epoch_: expanded during the current call
  uint32_t epoch_ = 0;
};

}  // namespace duet::grammar
