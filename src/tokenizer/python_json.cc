#include "tokenizer/python_json.h"

#include "base/error.h"

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

// Python's float repr and nlohmann's shortest round-trip form agree ("1.0", "1e+20", "1e-05").
std::string number(const nlohmann::ordered_json& v) { return v.dump(); }

}  // namespace

void python_json_append(std::string& out, const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        append_string(out, it.key());
        out += ": ";
        python_json_append(out, it.value());
      }
      out += '}';
      break;
    }
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        python_json_append(out, v[i]);
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

std::string python_json(const nlohmann::ordered_json& value) {
  std::string out;
  python_json_append(out, value);
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
