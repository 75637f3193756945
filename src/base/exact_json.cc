#include "base/exact_json.h"

#include <fmt/format.h>

#include <unordered_map>
#include <vector>

namespace duet {
namespace {

using Json = nlohmann::ordered_json;
using Members = Json::object_t::Container;  // ordered_map is a vector of (key, value): appended to directly

// Objects up to this many keys find a repeated key by scanning; larger ones get a hash index.
constexpr size_t kScannedKeys = 8;
// A path in an error names at most this many bytes (a hostile one could be as long as the body).
constexpr size_t kMaxPathBytes = 200;

// A SAX handler that builds the document like nlohmann's own, except for integer literals beyond 64 bits: nlohmann
// hands those over as a double with the literal's text, and the text is what is kept.
class ExactBuilder {
 public:
  ExactBuilder(Json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

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
  struct Open {
    Json* value;
    std::string name;                               // where it sits in its parent: `.key` or `[i]`
    std::unordered_map<std::string, size_t> index;  // an object past kScannedKeys: key -> its member's position
  };

  // Places a value where the parser is: the root, the next array element, or the member named by the last key.
  Json* place(Json value) {
    if (++values_ > limits_.max_values)
      fail(JsonLimitError::Limit::values, fmt::format("has more than {} values", limits_.max_values), true);
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Open& parent = stack_.back();
    if (parent.value->is_array()) {
      parent.value->push_back(std::move(value));
      return &parent.value->back();
    }
    Members& members = parent.value->get_ref<Json::object_t&>();
    if (Json* slot = member(parent, members)) {  // a repeated key: its first place, its last value (Python's dict)
      *slot = std::move(value);
      return slot;
    }
    if (members.size() >= limits_.max_object_keys)
      fail(JsonLimitError::Limit::object_keys,
           fmt::format("has more than {} keys in one object", limits_.max_object_keys), false);
    members.emplace_back(std::move(key_), std::move(value));
    if (!parent.index.empty() || members.size() > kScannedKeys) index(parent, members);
    return &members.back().second;
  }
  // The member named key_ of an open object, or null.
  Json* member(Open& object, Members& members) const {
    if (members.size() <= kScannedKeys) {
      for (auto& [key, value] : members)
        if (key == key_) return &value;
      return nullptr;
    }
    auto it = object.index.find(key_);
    return it == object.index.end() ? nullptr : &members[it->second].second;
  }
  // Adds the newest member to the object's index, first indexing the ones scanned so far.
  static void index(Open& object, const Members& members) {
    if (object.index.empty())
      for (size_t i = 0; i + 1 < members.size(); ++i) object.index.emplace(members[i].first, i);
    object.index.emplace(members.back().first, members.size() - 1);
  }
  bool put(Json value) {
    place(std::move(value));
    return true;
  }
  bool open(Json container) {
    if (static_cast<int>(stack_.size()) >= limits_.max_depth)
      fail(JsonLimitError::Limit::depth, fmt::format("nests deeper than {} levels", limits_.max_depth), true);
    std::string name = slot_name();
    Json* placed = place(std::move(container));
    stack_.push_back(Open{placed, std::move(name), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  // Where the next value goes, relative to the innermost open container: `[i]`, `.key`, or nothing at the top.
  std::string slot_name() const {
    if (stack_.empty()) return {};
    const Json& parent = *stack_.back().value;
    return parent.is_array() ? fmt::format("[{}]", parent.size()) : "." + key_;
  }
  // Throws, naming the path of the open containers, and of the slot being filled when `at_slot`.
  [[noreturn]] void fail(JsonLimitError::Limit limit, const std::string& what, bool at_slot) const {
    std::string path;
    for (const Open& open : stack_) {
      if (path.size() > kMaxPathBytes) break;
      path += open.name;
    }
    if (at_slot) path += slot_name();
    if (path.starts_with('.')) path.erase(0, 1);
    if (path.size() > kMaxPathBytes) path = path.substr(0, kMaxPathBytes) + "...";
    throw JsonLimitError(limit, what, std::move(path));
  }

  Json& root_;
  const JsonLimits& limits_;
  std::vector<Open> stack_;  // the open containers; pointers stay valid because only the innermost one grows
  std::string key_;
  size_t values_ = 0;
};

}  // namespace

nlohmann::ordered_json parse_exact_json(std::string_view text, const JsonLimits& limits) {
  Json root;
  ExactBuilder builder(root, limits);
  Json::sax_parse(text, &builder);
  return root;
}

std::string JsonLimitError::about(std::string_view subject) const {
  return path_.empty() ? fmt::format("{} {}", subject, what()) : fmt::format("{} {} (at `{}`)", subject, what(), path_);
}

std::optional<std::string> exact_integer_text(const nlohmann::ordered_json& value) {
  if (!value.is_binary()) return std::nullopt;
  const auto& binary = value.get_binary();
  if (!binary.has_subtype() || binary.subtype() != kExactIntegerSubtype) return std::nullopt;
  return std::string(binary.begin(), binary.end());
}

}  // namespace duet
