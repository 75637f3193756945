#pragma once
// Raw text in which given words never occur: the reply before a constrained tool call (which must not spell
// "<tool_call>" in plain bytes, or the output parser would read a call the grammar never held), and a tool call's
// string parameter (which must not spell the tags that end it). A regular expression, so one rule without recursion:
// every word starts with the same character (`<`), found nowhere else in any word, so the text is runs of other
// characters and "attempts" (a proper prefix of a word, starting at that character) each broken off by a character
// that does not continue it.
#include <string>
#include <vector>

#include "grammar/expr.h"

namespace duet::grammar {

// Throws duet::Error when the words break the rule above.
Expr text_avoiding(const std::vector<std::string>& words);

}  // namespace duet::grammar
