#include "base/exact_json.h"

#include <vector>

namespace duet {
namespace {

using Json = nlohmann::ordered_json;

// A SAX handler that builds the document like nlohmann's own, except for integer literals beyond 64 bits: nlohmann
// hands those over as a double with the literal's text, and the text is what is kept.
class ExactBuilder {
 public:
  explicit ExactBuilder(Json& root) : root_(root) {}

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool value) { return put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return put(Json(value)); }
  bool number_float(Json::number_float_t value, const std::string& text) {
    if (text.find_first_of(".eE") == std::string::npos)
      return put(Json::binary(std::vector<uint8_t>(text.begin(), text.end()), kExactIntegerSubtype));
    return put(Json(value));
  }
  bool string(std::string& value) { return put(Json(std::move(value))); }
  bool binary(Json::binary_t& value) { return put(Json::binary(std::move(value))); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool key(std::string& key) {
    key_ = std::move(key);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    throw error;  // the caller sees nlohmann's own message (position and what was expected)
  }

 private:
  // Places a value where the parser is: the root, the next array element, or the member named by the last key.
  Json* place(Json value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    Json& slot = parent[key_];  // a repeated key: its first place, its last value (Python's dict)
    slot = std::move(value);
    return &slot;
  }
  bool put(Json value) {
    place(std::move(value));
    return true;
  }
  bool open(Json container) {
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  std::vector<Json*> stack_;  // the open containers; pointers stay valid because only the innermost one grows
  std::string key_;
};

}  // namespace

nlohmann::ordered_json parse_exact_json(std::string_view text) {
  Json root;
  ExactBuilder builder(root);
  Json::sax_parse(text, &builder);
  return root;
}

std::optional<std::string> exact_integer_text(const nlohmann::ordered_json& value) {
  if (!value.is_binary()) return std::nullopt;
  const auto& binary = value.get_binary();
  if (!binary.has_subtype() || binary.subtype() != kExactIntegerSubtype) return std::nullopt;
  return std::string(binary.begin(), binary.end());
}

}  // namespace duet
