#include "base/python_float.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/error.h"

namespace duet {

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // The shortest digits that round-trip (what Python's repr picks too), as d.ddde[+-]XX.
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific);
  if (error != std::errc()) fail("python_float_repr: cannot format {}", x);
  const std::string_view text(buffer, static_cast<size_t>(end - buffer));
  const size_t e = text.find('e');
  const bool negative = text.front() == '-';
  std::string digits;  // the significant digits without the point
  for (char c : text.substr(negative ? 1 : 0, e - (negative ? 1 : 0)))
    if (c != '.') digits += c;
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());  // x = d.ddd * 10^exponent

  std::string out = negative ? "-" : "";
  // Python writes positional notation for 1e-4 <= |x| < 1e16 and scientific otherwise (float_repr_style 'short').
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = std::abs(exponent);
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (exponent < 0) {
    out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
  } else {
    const auto integer_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= integer_digits) {
      out.append(digits).append(integer_digits - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, integer_digits).append(".").append(digits, integer_digits);
    }
  }
  return out;
}

double python_round(double x, int digits) {
  if (!std::isfinite(x)) return x;
  // glibc's printf rounds the exact binary value correctly (ties to even), as Python's dtoa-based round does;
  // reading the decimal back gives the nearest double, as Python does too.
  char buffer[400];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, x);
  return std::strtod(buffer, nullptr);
}

}  // namespace duet
