#pragma once
// Sets of Unicode scalar values (code points without the surrogates) as sorted, disjoint ranges, and the grammar
// that writes one of them inside a JSON string: raw UTF-8 for what JSON allows raw, one fixed escape for the rest
// ('"' -> \", '\' -> \\, controls -> \n \t \r \b \f or \u00XX), so a string has one spelling.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "grammar/expr.h"

namespace duet::grammar {

class CharSet {
 public:
  static constexpr uint32_t kMax = 0x10FFFF;
  CharSet() = default;
  static CharSet range(uint32_t lo, uint32_t hi);
  static CharSet of(uint32_t c) { return range(c, c); }
  static CharSet any() { return range(0, kMax); }
  void add(uint32_t lo, uint32_t hi);
  void add(const CharSet& other);
  CharSet complement() const;
  CharSet minus(const CharSet& other) const;
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t c) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // surrogates D800-DFFF never included
};

// UTF-8 bytes of every code point in [lo, hi] (surrogates skipped), as alternatives of byte-range sequences.
Expr utf8_range(uint32_t lo, uint32_t hi);
// One character of `set` as it is written inside a JSON string (see above).
Expr json_string_char(const CharSet& set);
// One character of `set` as raw UTF-8 (text outside JSON: a tool call's string parameter, the reply before a call).
Expr utf8_char(const CharSet& set);

// How a string's characters are written: json_string_char for JSON strings; the grammars of tool calls write JSON
// strings without '<' and raw text (tool_call_grammar.h). Everything that writes a character of a string takes one.
using CharWriter = std::function<Expr(const CharSet&)>;

}  // namespace duet::grammar
