#pragma once
// JSON parsed the way Python's json.loads reads it, for values that are written back out (the decision prompt
// renders a client's JSON with Python's json.dumps): object keys in the order given (a repeated key keeps its
// first place and takes its last value), and integers of any size kept exactly. nlohmann holds integers up to 64
// bits; a longer integer literal is kept as its decimal text in a binary value with subtype
// kExactIntegerSubtype, which JSON text can never produce, so nothing else can be mistaken for one.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace duet {

constexpr uint64_t kExactIntegerSubtype = 0x1D;

// Parses `text`; throws nlohmann::json::exception on invalid JSON (including a number beyond a double's range).
nlohmann::ordered_json parse_exact_json(std::string_view text);

// The decimal text of an integer literal too long for 64 bits, or nullopt for any other value.
std::optional<std::string> exact_integer_text(const nlohmann::ordered_json& value);

}  // namespace duet
