#pragma once
// JSON written the way Python's json.dumps(value, ensure_ascii=False) writes it: by default with the separators
// ", " and ": " and keys in their given order (the chat template's `tojson` under transformers); with
// PythonJsonStyle, also as json.dumps(..., sort_keys=True, separators=(",", ":")) (the decision prompt's render).
// Floats as Python's repr, integers exactly (those beyond 64 bits too, as base/exact_json.h keeps them).
// Also Python's str() of a scalar, which is Jinja's `| string`.
#include <nlohmann/json.hpp>
#include <string>

namespace duet::tokenizer {

struct PythonJsonStyle {
  bool compact = false;    // separators (",", ":") instead of (", ", ": ")
  bool sort_keys = false;  // object keys by code point (UTF-8 byte order) instead of as given
};

std::string python_json(const nlohmann::ordered_json& value, PythonJsonStyle style = {});
void python_json_append(std::string& out, const nlohmann::ordered_json& value, PythonJsonStyle style = {});

// str(value) in Python for what json.loads gives: strings as they are, True/False/None, numbers as repr.
// Objects and lists as Python's repr would print them are not needed by the template and are refused.
std::string python_str(const nlohmann::ordered_json& value);

}  // namespace duet::tokenizer
