// parse_exact_json: Python's json.loads semantics for key order and repeated keys, kept when objects grow past the
// size where a hash index takes over from scanning, and the limits (depth, keys in one object, values) refused with
// the path where they were passed.
#include "base/exact_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace duet {
namespace {

// The reference: a list of (key, value) where a repeated key keeps its first place and takes its last value, as a
// Python dict does. Written as the plain scan it is, independent of the parser.
std::vector<std::pair<std::string, int>> python_dict(const std::vector<std::pair<std::string, int>>& pairs) {
  std::vector<std::pair<std::string, int>> dict;
  for (const auto& pair : pairs) {
    auto it = std::find_if(dict.begin(), dict.end(), [&](const auto& entry) { return entry.first == pair.first; });
    if (it == dict.end())
      dict.push_back(pair);
    else
      it->second = pair.second;
  }
  return dict;
}

TEST(ExactJson, RepeatedKeysKeepTheirFirstPlaceAndLastValueAtEverySize) {
  std::mt19937 rng(7);
  for (int size : {1, 2, 8, 9, 10, 50, 700}) {
    std::vector<std::pair<std::string, int>> pairs;
    std::string text = "{";
    for (int i = 0; i < size; ++i) {
      // Keys from a pool smaller than the object, so that about half of them repeat (some before the index exists).
      std::string key = "k";
      key += std::to_string(rng() % std::max(1, size / 2 + 1));
      pairs.emplace_back(key, i);
      if (i) text += ',';
      text.append("\"").append(key).append("\":").append(std::to_string(i));
    }
    text += "}";
    const auto parsed = parse_exact_json(text);
    const auto expected = python_dict(pairs);
    ASSERT_EQ(parsed.size(), expected.size()) << size;
    size_t at = 0;
    for (auto it = parsed.begin(); it != parsed.end(); ++it, ++at) {
      EXPECT_EQ(it.key(), expected[at].first) << size;
      EXPECT_EQ(it.value().get<int>(), expected[at].second) << size << " " << it.key();
    }
  }
}

std::string object_of(size_t keys) {
  std::string text = "{";
  for (size_t i = 0; i < keys; ++i) text.append(i ? ",\"" : "\"").append(std::to_string(i)).append("\":0");
  return text + "}";
}

JsonLimitError limit_error(std::string_view text, const JsonLimits& limits = {}) {
  try {
    parse_exact_json(text, limits);
  } catch (const JsonLimitError& e) {
    return e;
  }
  ADD_FAILURE() << "no limit was passed";
  return JsonLimitError(JsonLimitError::Limit::depth, "", "");
}

TEST(ExactJson, KeysInOneObjectAreLimitedAndTheObjectNamed) {
  const std::string many = object_of(kMaxJsonObjectKeys + 1);
  const JsonLimitError error = limit_error("{\"a\": {\"b\": [1, " + many + "]}}");
  EXPECT_EQ(error.limit(), JsonLimitError::Limit::object_keys);
  EXPECT_EQ(error.path(), "a.b[1]");
  EXPECT_EQ(error.about("the body"), "the body has more than 10000 keys in one object (at `a.b[1]`)");
  // The control: exactly the limit is read, and a repeated key is not a new one.
  EXPECT_EQ(parse_exact_json(object_of(kMaxJsonObjectKeys)).size(), kMaxJsonObjectKeys);
  std::string repeated = object_of(kMaxJsonObjectKeys);
  repeated.insert(repeated.size() - 1, ",\"0\":1");
  EXPECT_EQ(parse_exact_json(repeated)["0"], 1);
}

TEST(ExactJson, ValuesInTheDocumentAreLimited) {
  const JsonLimits few{kMaxJsonDepth, kMaxJsonObjectKeys, 10};
  const JsonLimitError error = limit_error(R"({"a": [1, 2, 3], "b": {"c": [4, 5, 6, 7]}})", few);
  EXPECT_EQ(error.limit(), JsonLimitError::Limit::values);
  EXPECT_EQ(error.path(), "b.c[3]");  // the 11th value: the root, a and its 3 numbers, b, c, 4, 5, 6, then 7
  EXPECT_NO_THROW(parse_exact_json(R"({"a": [1, 2, 3], "b": {"c": [4, 5, 6]}})", few));  // 10: the control

  // The default, in a flat array: the root and kMaxJsonValues - 1 elements fit; one more does not.
  std::string array = "[0";
  for (size_t i = 2; i < kMaxJsonValues; ++i) array += ",0";
  EXPECT_EQ(parse_exact_json(array + "]").size(), kMaxJsonValues - 1);
  EXPECT_EQ(limit_error(array + ",0]").path(), "[" + std::to_string(kMaxJsonValues - 1) + "]");
}

TEST(ExactJson, DepthIsLimitedWhileReadingEvenFarPastTheLimit) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_NO_THROW(parse_exact_json(nested(kMaxJsonDepth)));
  const JsonLimitError error = limit_error(nested(kMaxJsonDepth + 1));
  EXPECT_EQ(error.limit(), JsonLimitError::Limit::depth);
  EXPECT_EQ(error.path().substr(0, 9), "[0][0][0]");
  // Deep enough to overflow a recursive parser's stack; a path is cut short.
  const JsonLimitError deep = limit_error(nested(1000000));
  EXPECT_EQ(deep.limit(), JsonLimitError::Limit::depth);
  EXPECT_LE(deep.path().size(), 210u);
  // Brackets inside strings are not nesting.
  EXPECT_NO_THROW(parse_exact_json("[\"" + std::string(1000, '[') + "\"]"));
}

TEST(ExactJson, LongIntegersStayExact) {
  const auto parsed = parse_exact_json(R"({"n": 123456789012345678901234567890, "f": 1.5, "i": -3})");
  EXPECT_EQ(exact_integer_text(parsed["n"]), "123456789012345678901234567890");
  EXPECT_EQ(parsed["f"], 1.5);
  EXPECT_EQ(parsed["i"], -3);
}

}  // namespace
}  // namespace duet
