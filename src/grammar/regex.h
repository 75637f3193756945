#pragma once
// JSON Schema `pattern` (ECMA-262 syntax, matched as ajv does: unicode mode, a search anywhere in the string unless
// anchored) compiled to the grammar of a JSON string's content whose decoded text matches it.
//
// The subset (docs/api.md): literals and escapes (\n \t \r \f \v \0 \/ \. ... \uXXXX \u{X...} \xXX), '.', classes
// [...] with ranges and negation, \d \w \s \D \W \S, groups (...) and (?:...), alternation, quantifiers * + ? {n}
// {n,} {n,m} (lazy forms too: same language), ^ at the start and $ at the end of the pattern or of a top-level
// alternative. Refused by name: backreferences, lookaround, \b \B, named groups, unicode property escapes, anchors
// elsewhere. Unbounded repetition inside a bounded one is allowed; counts above 1000 are refused.
#include <string>

#include "grammar/char_set.h"
#include "grammar/expr.h"

namespace duet::grammar {

// Throws duet::Error naming the unsupported construct and its offset. `write` spells each character (a JSON string's
// content by default; raw text for a tool call's string parameter).
Expr regex_string_content(const std::string& pattern, const CharWriter& write = json_string_char);

}  // namespace duet::grammar
