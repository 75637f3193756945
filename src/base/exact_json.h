#pragma once
// JSON parsed the way Python's json.loads reads it, for values that are written back out (the decision prompt
// renders a client's JSON with Python's json.dumps): object keys in the order given (a repeated key keeps its
// first place and takes its last value), and integers of any size kept exactly. nlohmann holds integers up to 64
// bits; a longer integer literal is kept as its decimal text in a binary value with subtype
// kExactIntegerSubtype, which JSON text can never produce, so nothing else can be mistaken for one.
//
// The parse is linear in the text's size whatever its shape (ordered_json's own insert scans the keys before it, so
// an object of n keys would cost n^2), and limits are enforced while it reads, before the value grows past them:
// nesting depth, keys in one object, and values in the whole document.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/json_depth.h"

namespace duet {

constexpr uint64_t kExactIntegerSubtype = 0x1D;

// OpenAI's structured outputs allow 5,000 properties in a whole schema; no request field needs more keys than this.
constexpr size_t kMaxJsonObjectKeys = 10000;
// Every value counts (containers, keys' values, array elements): about 16 MiB of nodes at most.
constexpr size_t kMaxJsonValues = 1u << 20;

struct JsonLimits {
  int max_depth = kMaxJsonDepth;
  size_t max_object_keys = kMaxJsonObjectKeys;
  size_t max_values = kMaxJsonValues;
};

// A document past one of JsonLimits. what() says which limit ("has more than 10000 keys in one object"); path() is
// where it was passed (`messages[3].content`, empty for the top level).
class JsonLimitError : public std::runtime_error {
 public:
  enum class Limit { depth, object_keys, values };
  JsonLimitError(Limit limit, const std::string& message, std::string path)
      : std::runtime_error(message), limit_(limit), path_(std::move(path)) {}
  Limit limit() const { return limit_; }
  const std::string& path() const { return path_; }
  // "<subject> has more than 10000 keys in one object (at `state`)": the message a client gets.
  std::string about(std::string_view subject) const;

 private:
  Limit limit_;
  std::string path_;
};

// Parses `text`; throws nlohmann::json::exception on invalid JSON (including a number beyond a double's range) and
// JsonLimitError past `limits`.
nlohmann::ordered_json parse_exact_json(std::string_view text, const JsonLimits& limits = {});

// The decimal text of an integer literal too long for 64 bits, or nullopt for any other value.
std::optional<std::string> exact_integer_text(const nlohmann::ordered_json& value);

}  // namespace duet
