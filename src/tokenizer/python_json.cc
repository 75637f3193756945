#include "tokenizer/python_json.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/exact_json.h"
#include "base/python_float.h"

namespace duet::tokenizer {
namespace {

void append_string(std::string& out, const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {  // other controls as \u00XX, lowercase like Python
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;  // ensure_ascii=False: everything else, DEL and non-ASCII included, as is
        }
    }
  }
  out += '"';
}

// Integers exactly; floats as Python's repr (nlohmann's own form differs from it, e.g. 1e+15 for 1000000000000000.0).
std::string number(const nlohmann::ordered_json& v) {
  if (v.is_number_float()) return python_float_repr(v.get<double>());
  if (auto digits = exact_integer_text(v)) return *digits;
  if (v.is_binary()) fail("python_json: a binary value has no JSON form");
  return v.dump();
}

}  // namespace

void python_json_append(std::string& out, const nlohmann::ordered_json& v, PythonJsonStyle style) {
  const char* item_separator = style.compact ? "," : ", ";
  const char* key_separator = style.compact ? ":" : ": ";
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      std::vector<nlohmann::ordered_json::const_iterator> members;
      for (auto it = v.begin(); it != v.end(); ++it) members.push_back(it);
      if (style.sort_keys)  // UTF-8 byte order is code point order, which is how Python sorts str keys
        std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += item_separator;
        append_string(out, members[i].key());
        out += key_separator;
        python_json_append(out, members[i].value(), style);
      }
      out += '}';
      break;
    }
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += item_separator;
        python_json_append(out, v[i], style);
      }
      out += ']';
      break;
    }
    case nlohmann::ordered_json::value_t::string:
      append_string(out, v.get_ref<const std::string&>());
      break;
    case nlohmann::ordered_json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case nlohmann::ordered_json::value_t::null:
      out += "null";
      break;
    default:
      out += number(v);
      break;
  }
}

std::string python_json(const nlohmann::ordered_json& value, PythonJsonStyle style) {
  std::string out;
  python_json_append(out, value, style);
  return out;
}

std::string python_str(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::string:
      return v.get<std::string>();
    case nlohmann::ordered_json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::null:
      return "None";
    case nlohmann::ordered_json::value_t::object:
    case nlohmann::ordered_json::value_t::array:
      fail("python_str: lists and objects are written as JSON instead");
    default:
      return number(v);
  }
}

}  // namespace duet::tokenizer
