#pragma once
// The pieces of JSON text in duet's one compact form (no whitespace anywhere), as grammar expressions: strings,
// integers and numbers within bounds, and any JSON value (json_object mode, `{}` and `true` schemas).
//
// Numbers are written in a bounded form so that every output is a finite number JSON.parse reads exactly as an
// integer when it must be one: integers have at most 15 digits, numbers at most 15 integer digits, 6 fraction
// digits and a two-digit exponent (bounded numbers: no exponent, fraction digits ending in 1-9).
#include <cstdint>
#include <optional>

#include "grammar/char_set.h"
#include "grammar/expr.h"
#include "grammar/grammar_builder.h"

namespace duet::grammar {

struct Bound {
  double value = 0;
  bool exclusive = false;
};

Expr json_string(Expr content);  // '"' content '"'
// max < 0: unbounded. A length-bounded string keeps to the Basic Multilingual Plane (json_values.cc says why).
Expr any_string_content(int32_t min_chars = 0, int32_t max_chars = -1, const CharWriter& write = json_string_char);
// Integers in [min, max] (absent: no bound); throws duet::Error when no integer is in range or a bound lies
// beyond 15 digits.
Expr json_integer(std::optional<Bound> min, std::optional<Bound> max);
Expr json_number(std::optional<Bound> min, std::optional<Bound> max);
// Declares and defines a rule "any_value": any JSON value (the caller keeps its id and calls it).
int32_t any_value_rule(GrammarBuilder& builder, const CharWriter& write = json_string_char);
// '{' ... '}' with any keys and values of `value` (json_object mode), count in [min, max] (max < 0: unbounded).
Expr json_object_of(Expr value, int32_t min_properties = 0, int32_t max_properties = -1,
                    const CharWriter& write = json_string_char);

}  // namespace duet::grammar
