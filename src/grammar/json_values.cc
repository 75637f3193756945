#include "grammar/json_values.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "grammar/char_set.h"

namespace duet::grammar {

namespace {

constexpr int64_t kLargest = 999'999'999'999'999;  // 15 digits

Expr digit() { return byte_range('0', '9'); }

// Decimal numerals without leading zeros of every integer in [lo, hi], 0 <= lo <= hi.
Expr same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return empty();
  if (lo[0] == hi[0]) return seq({byte_of(static_cast<uint8_t>(lo[0])), same_length(lo.substr(1), hi.substr(1))});
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  const std::string zeros(rest_lo.size(), '0'), nines(rest_lo.size(), '9');
  const auto any_rest = [&] {
    return repeat(digit(), static_cast<int32_t>(rest_lo.size()), static_cast<int32_t>(rest_lo.size()));
  };
  if (rest_lo == zeros && rest_hi == nines)
    return seq({byte_range(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0])), any_rest()});
  std::vector<Expr> parts{seq({byte_of(static_cast<uint8_t>(lo[0])), same_length(rest_lo, nines)})};
  if (lo[0] + 1 <= hi[0] - 1)
    parts.push_back(seq({byte_range(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)), any_rest()}));
  parts.push_back(seq({byte_of(static_cast<uint8_t>(hi[0])), same_length(zeros, rest_hi)}));
  return alt(std::move(parts));
}

Expr natural_range(int64_t lo, int64_t hi) {
  std::vector<Expr> parts;
  int64_t low = lo;
  for (int64_t top = 9; low <= hi; top = top * 10 + 9) {  // one digit count at a time
    if (low > top) continue;
    const int64_t high = std::min(hi, top);
    parts.push_back(same_length(std::to_string(low), std::to_string(high)));
    low = high + 1;
    if (top >= kLargest) break;
  }
  return parts.size() == 1 ? parts[0] : alt(std::move(parts));
}

// Integers in [lo, hi] (either order of signs).
Expr integer_range(int64_t lo, int64_t hi) {
  std::vector<Expr> parts;
  if (lo < 0)
    parts.push_back(seq({byte_of('-'), natural_range(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo)}));
  if (hi >= 0) parts.push_back(natural_range(std::max<int64_t>(lo, 0), hi));
  return parts.size() == 1 ? parts[0] : alt(std::move(parts));
}

double checked(const Bound& b) {
  if (!std::isfinite(b.value) || std::fabs(b.value) > static_cast<double>(kLargest))
    fail("the bound {} lies beyond the 15-digit numbers duet writes", b.value);
  return b.value;
}

// The smallest / largest integer inside the bound.
int64_t integer_min(const std::optional<Bound>& min) {
  if (!min) return -kLargest;
  const double v = checked(*min);
  const double c = std::ceil(v);
  return static_cast<int64_t>(min->exclusive && c == v ? c + 1 : c);
}
int64_t integer_max(const std::optional<Bound>& max) {
  if (!max) return kLargest;
  const double v = checked(*max);
  const double f = std::floor(v);
  return static_cast<int64_t>(max->exclusive && f == v ? f - 1 : f);
}

Expr fraction() { return seq({byte_of('.'), repeat(digit(), 0, 5), byte_range('1', '9')}); }

}  // namespace

Expr json_string(Expr content) { return seq({byte_of('"'), std::move(content), byte_of('"')}); }

Expr any_string_content(int32_t min_chars, int32_t max_chars, const CharWriter& write) {
  // JSON Schema counts a string's length in code points; JavaScript validators (zod, as the AI SDK and LangChain use
  // it) count UTF-16 units, where a character past U+FFFF is two. A length-bounded string keeps to the Basic
  // Multilingual Plane, where the two counts agree, so every client's validator accepts what duet writes.
  const bool bounded = min_chars > 0 || max_chars >= 0;
  return repeat(write(bounded ? CharSet::range(0, 0xFFFF) : CharSet::any()), min_chars, max_chars);
}

Expr json_integer(std::optional<Bound> min, std::optional<Bound> max) {
  const int64_t lo = integer_min(min), hi = integer_max(max);
  if (lo > hi) fail("no integer lies within the bounds");
  return integer_range(lo, hi);
}

Expr json_number(std::optional<Bound> min, std::optional<Bound> max) {
  if (!min && !max) {
    // -?(0|[1-9][0-9]{0,14})(\.[0-9]{1,6})?([eE][+-]?[0-9]{1,2})?
    return seq({optional(byte_of('-')), alt({byte_of('0'), seq({byte_range('1', '9'), repeat(digit(), 0, 14)})}),
                optional(seq({byte_of('.'), repeat(digit(), 1, 6)})),
                optional(seq({alt({byte_of('e'), byte_of('E')}), optional(alt({byte_of('+'), byte_of('-')})),
                              repeat(digit(), 1, 2)}))});
  }
  // Bounded: an integer in range, or k.f (f > 0, k an integer) when every k + f of that sign stays in range.
  std::vector<Expr> parts;
  const int64_t lo = integer_min(min), hi = integer_max(max);
  if (lo <= hi) parts.push_back(integer_range(lo, hi));
  const double low = min ? checked(*min) : -static_cast<double>(kLargest);
  const double high = max ? checked(*max) : static_cast<double>(kLargest);
  // Positive k.f (0 < f < 1): k >= ceil(low) gives k + f > low; k <= floor(high) - 1 gives k + f < high.
  const int64_t pk_lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(low)));
  const int64_t pk_hi = static_cast<int64_t>(std::floor(high)) - 1;
  if (pk_lo <= pk_hi) parts.push_back(seq({natural_range(pk_lo, pk_hi), fraction()}));
  // Negative -(k.f): k >= ceil(-high) gives -(k + f) < high; k <= floor(-low) - 1 gives -(k + f) > low.
  const int64_t nk_lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(-high)));
  const int64_t nk_hi = static_cast<int64_t>(std::floor(-low)) - 1;
  if (nk_lo <= nk_hi) parts.push_back(seq({byte_of('-'), natural_range(nk_lo, nk_hi), fraction()}));
  if (parts.empty()) fail("no number duet writes lies within the bounds");
  return parts.size() == 1 ? parts[0] : alt(std::move(parts));
}

Expr json_object_of(Expr value, int32_t min_properties, int32_t max_properties, const CharWriter& write) {
  const Expr member = seq({json_string(any_string_content(0, -1, write)), byte_of(':'), value});
  Expr members;
  if (max_properties == 0) {
    members = empty();
  } else {
    const int32_t rest_max = max_properties < 0 ? -1 : max_properties - 1;
    members = seq({member, repeat(seq({byte_of(','), member}), std::max(0, min_properties - 1), rest_max)});
    if (min_properties == 0) members = optional(members);
  }
  return seq({byte_of('{'), members, byte_of('}')});
}

int32_t any_value_rule(GrammarBuilder& builder, const CharWriter& write) {
  const int32_t value = builder.declare("any_value");
  const Expr v = call(value);
  const Expr array = seq({byte_of('['), optional(seq({v, star(seq({byte_of(','), v}))})), byte_of(']')});
  builder.define(value, alt({json_object_of(v, 0, -1, write), array, json_string(any_string_content(0, -1, write)),
                             json_number({}, {}), literal("true"), literal("false"), literal("null")}));
  return value;
}

}  // namespace duet::grammar
