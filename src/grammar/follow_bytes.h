#pragma once
// For each node: the bytes that can come right after the rule it stands in returns (xgrammar calls the idea a rule's
// lookahead). A token probed at a node alone (compiled_grammar.h) whose bytes run past the rule's end is uncertain
// only if its next byte is one of these; otherwise no caller can take it, and it is rejected without the stack. The
// document's own end is followed by nothing.
#include <bitset>
#include <vector>

#include "grammar/grammar.h"

namespace duet::grammar {

using ByteSet = std::bitset<256>;

// follow[node]: the union over the rules the node belongs to (a merged node can belong to several).
std::vector<ByteSet> follow_bytes(const Grammar& g);

}  // namespace duet::grammar
