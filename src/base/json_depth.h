#pragma once
// Bracket nesting of JSON text, counted without parsing. nlohmann's parser keeps its own stack, but dump(),
// copies and our own walks over a parsed value recurse once per level, so a hostile depth (a request body, or a
// JSON document inside one of its strings, such as tool-call arguments) must be refused before it is parsed.
#include <string_view>

namespace duet {

// The deepest nesting any JSON we parse from a client or a model may have.
constexpr int kMaxJsonDepth = 64;

// True when `text` never nests arrays and objects deeper than `limit`; brackets inside strings do not count.
bool json_nesting_within(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace duet
