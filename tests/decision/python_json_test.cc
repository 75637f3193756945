// Python-compatible JSON: floats as repr, round(x, n), integers of any size exact, and the spec's render(). The
// expected strings are what CPython 3.11 prints for the same values (typed in from `python3 -c`).
#include <gtest/gtest.h>

#include <cmath>

#include "base/exact_json.h"
#include "base/python_float.h"
#include "decision/render.h"

namespace duet {
namespace {

TEST(PythonFloat, ReprIsPythons) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},  // nlohmann writes 1e+15 here
      {123456.789, "123456.789"},
      {5e-324, "5e-324"},
      {1.5e300, "1.5e+300"},
      {-0.0, "-0.0"},
      {2.5, "2.5"},
      {1e22, "1e+22"},
      {1e-7, "1e-07"},
      {0.0001, "0.0001"},
      {9999999999999998.0, "9999999999999998.0"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {0.30000000000000004, "0.30000000000000004"},
      {100.0, "100.0"},
      {-1.5e-10, "-1.5e-10"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {0.5871742963790894, "0.5871742963790894"},
  };
  for (const auto& [value, text] : cases) EXPECT_EQ(python_float_repr(value), text) << text;
  EXPECT_EQ(python_float_repr(NAN), "NaN");
  EXPECT_EQ(python_float_repr(-INFINITY), "-Infinity");
}

TEST(PythonFloat, RoundIsPythons) {
  // round(x, n): the exact binary value rounded, ties to even (0.03125 is exact, so a tie; 2.675 is below 2.675).
  const std::tuple<double, int, const char*> cases[] = {
      {0.03125, 4, "0.0312"}, {2.675, 2, "2.67"},  {0.00005, 4, "0.0001"}, {0.58717429, 4, "0.5872"},
      {-0.00001, 4, "-0.0"},  {0.99995, 4, "1.0"}, {0.12345, 4, "0.1235"}, {1.00005, 4, "1.0001"},
  };
  for (const auto& [value, digits, text] : cases)
    EXPECT_EQ(python_float_repr(python_round(value, digits)), text) << value;
}

TEST(ExactJson, KeepsIntegersOfAnySizeAndKeyOrder) {
  const auto value = parse_exact_json(
      R"({"z": 1, "a": [12345678901234567890, 123456789012345678901234567890, -98765432109876543210987654321,)"
      R"( 18446744073709551615, -9223372036854775808, 1E2, 0.10, 0.5e1, -0.0], "z": 2, "m": {"k": 18446744073709551617}})");
  // A repeated key keeps its first place and takes its last value, as Python's dict does.
  EXPECT_EQ(value.begin().key(), "z");
  EXPECT_EQ(value["z"], 2);
  EXPECT_EQ(decision::render(value),
            R"({"a":[12345678901234567890,123456789012345678901234567890,-98765432109876543210987654321,)"
            R"(18446744073709551615,-9223372036854775808,100.0,0.1,5.0,-0.0],"m":{"k":18446744073709551617},"z":2})");
  EXPECT_FALSE(exact_integer_text(value["z"]));
  EXPECT_EQ(*exact_integer_text(value["m"]["k"]), "18446744073709551617");
}

TEST(ExactJson, RefusesWhatPythonsJsonWouldNotRoundTrip) {
  // A number past a double's range: nlohmann refuses it (Python would read inf and write Infinity).
  EXPECT_THROW(parse_exact_json("[1e400]"), nlohmann::json::exception);
  EXPECT_THROW(parse_exact_json("{\"a\": }"), nlohmann::json::exception);
  EXPECT_THROW(parse_exact_json("\"\\ud800\""), nlohmann::json::exception);  // a lone surrogate
  EXPECT_THROW(parse_exact_json("[NaN]"), nlohmann::json::exception);
}

TEST(Render, StringsAsIsEverythingElseAsSortedCompactJson) {
  EXPECT_EQ(decision::render(decision::Json("a \"b\"\n")), "a \"b\"\n");
  EXPECT_EQ(decision::render(decision::Json(nullptr)), "null");
  EXPECT_EQ(decision::render(decision::Json(true)), "true");
  EXPECT_EQ(decision::render(decision::Json(3.0)), "3.0");
  // Keys by code point: U+FF5A before U+1F600 (UTF-16 order would put the emoji first), uppercase before lowercase.
  const auto object = parse_exact_json(
      "{\"\xF0\x9F\x98\x80\": 1, \"\xEF\xBD\x9A\": 2, \"b\": 3, \"B\": 4, \"\": 5, \"\xC3\xA9\": [\"\\u0001\\n\\\"\", "
      "\"\\u007f\\u2028\"]}");
  EXPECT_EQ(decision::render(object),
            "{\"\":5,\"B\":4,\"b\":3,\"\xC3\xA9\":[\"\\u0001\\n\\\"\",\"\x7F\xE2\x80\xA8\"],\"\xEF\xBD\x9A\":2,"
            "\"\xF0\x9F\x98\x80\":1}");
  // An option drops "description" when it has none; sorted keys put "description" first.
  EXPECT_EQ(decision::render_option({"tech", std::nullopt}), R"({"option_id":"tech"})");
  EXPECT_EQ(decision::render_option({"tech", "Bugs"}), R"({"description":"Bugs","option_id":"tech"})");
}

}  // namespace
}  // namespace duet
