#pragma once
// JSON written the way the chat template's `tojson` writes it under transformers: Python's
// json.dumps(value, ensure_ascii=False) with the default separators ", " and ": ", keys in their given order.
// Also Python's str() of a scalar, which is Jinja's `| string`.
#include <nlohmann/json.hpp>
#include <string>

namespace duet::tokenizer {

std::string python_json(const nlohmann::ordered_json& value);
void python_json_append(std::string& out, const nlohmann::ordered_json& value);

// str(value) in Python for what json.loads gives: strings as they are, True/False/None, numbers as repr.
// Objects and lists as Python's repr would print them are not needed by the template and are refused.
std::string python_str(const nlohmann::ordered_json& value);

}  // namespace duet::tokenizer
