#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "grammar/char_set.h"
#include "grammar/grammar_builder.h"
#include "grammar/json_values.h"
#include "grammar/regex.h"

namespace duet::grammar {

namespace {

using Json = nlohmann::ordered_json;  // properties are written in the schema's order

// Keywords that describe and never constrain.
const std::set<std::string> kAnnotations = {
    "$schema",    "$id",      "$comment",  "$anchor", "title",       "description",      "default",        "examples",
    "deprecated", "readOnly", "writeOnly", "$defs",   "definitions", "contentMediaType", "contentEncoding"};
const std::set<std::string> kObjectWords = {"properties", "required", "additionalProperties", "minProperties",
                                            "maxProperties"};
const std::set<std::string> kArrayWords = {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"};
const std::set<std::string> kStringWords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberWords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kOtherWords = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};

// Anchored patterns for the formats ajv-formats checks, restricted to values it accepts in full mode (dates never
// past the month's 28th/30th/31st day, times with a zone).
const std::map<std::string, std::string> kFormats = {
    {"date", R"(^\d{4}-((0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)$)"},
    {"time", R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"},
    {"date-time",
     R"(^\d{4}-((0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"},
    {"uuid", R"(^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$)"},
    {"email", R"(^[a-z0-9]+(\.[a-z0-9]+)*@([a-z0-9]+\.)+[a-z]{2,6}$)"},
    {"uri", R"(^https?://[a-z0-9]+(\.[a-z0-9]+)*(/[a-z0-9._~-]*)*$)"},
};

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

}  // namespace

class Compiler {
 public:
  Compiler(const Json& root, const SchemaOptions& options, GrammarBuilder& builder, CharWriter write)
      : root_(root), options_(options), builder_(builder), write_(std::move(write)) {}

  int32_t root_rule() { return rule_for_ref("#", ""); }
  std::vector<std::string>& ignored() { return ignored_; }

  Expr compile(const Json& s, const std::string& path) {
    if (++depth_ > 64) refuse(path, "schema nested too deeply");
    Expr out = compile_value(s, path);
    --depth_;
    return out;
  }

  // The schema's string values written raw (RawText): its string branches, enum and const strings, or any text where it
  // says nothing of a type. Values of other types are not written.
  Expr text(const Json& s, const std::string& path, const RawText& raw) {
    if (++depth_ > 64) refuse(path, "schema nested too deeply");
    Expr out = text_value(s, path, raw);
    --depth_;
    return out;
  }

 private:
  // Constraining keywords besides `combinator`, to fold into each branch.
  static Json siblings(const Json& s, const char* combinator) {
    Json rest = Json::object();
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it.key() != combinator && !kAnnotations.count(it.key())) rest[it.key()] = it.value();
    return rest;
  }

  // The target of a $ref without constraining siblings (the value form calls its rule, the text form inlines it).
  std::optional<std::string> lone_ref(const Json& s, const std::string& path) const {
    if (!s.contains("$ref")) return std::nullopt;
    if (!s["$ref"].is_string()) refuse(path, "$ref must be a string");
    if (!siblings(s, "$ref").empty()) return std::nullopt;
    return s["$ref"].get<std::string>();
  }

  // What the value and text forms read alike: a $ref with siblings and allOf are merged into one schema for `whole`;
  // anyOf / oneOf branches, the siblings folded into each, go to `branch`, which may leave one out (null). nullopt
  // when the schema has none of these keywords.
  template <typename Whole, typename Branch>
  std::optional<Expr> combined(const Json& s, const std::string& path, Whole whole, Branch branch) {
    if (s.contains("$ref")) return whole(merged(Json{{"$ref", s["$ref"]}}, siblings(s, "$ref"), path));
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) refuse(path + "/allOf", "expected a non-empty array");
      Json m = siblings(s, "allOf");
      for (const Json& part : s["allOf"]) m = merged(m, part, path + "/allOf");
      return whole(m);
    }
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!s.contains(combinator)) continue;
      const Json& branches = s[combinator];
      if (!branches.is_array() || branches.empty()) refuse(path + "/" + combinator, "expected a non-empty array");
      const Json rest = siblings(s, combinator);
      std::vector<Expr> parts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string at = fmt::format("{}/{}/{}", path, combinator, i);
        if (Expr part = branch(rest.empty() ? branches[i] : merged(rest, branches[i], at), at)) parts.push_back(part);
      }
      if (parts.empty()) refuse(path, "no branch admits a string, which this parameter is written as");
      return parts.size() == 1 ? parts[0] : alt(std::move(parts));
    }
    return std::nullopt;
  }

  Expr text_value(const Json& s, const std::string& path, const RawText& raw) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false admits no value");
      return raw.any;
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    if (const auto ref = lone_ref(s, path)) return text(resolve(*ref, path), path, raw);  // inlined: no rule
    const auto combined_text = combined(
        s, path, [&](const Json& whole) { return text(whole, path, raw); },
        [&](const Json& branch, const std::string& at) {
          return admits_string(branch, root_) ? text(branch, at, raw) : nullptr;
        });
    if (combined_text) return *combined_text;
    if (s.contains("enum") || s.contains("const")) {
      std::vector<Expr> parts;
      for (const Json& v : s.contains("const") ? Json::array({s["const"]}) : s["enum"])
        if (v.is_string() && raw.allows(v.get<std::string>())) parts.push_back(literal(v.get<std::string>()));
      if (parts.empty()) refuse(path, "no enum value is a string that a tool call can hold");
      return parts.size() == 1 ? parts[0] : alt(std::move(parts));
    }
    if (auto t = s.find("type"); t != s.end()) {
      const Json types = t->is_array() ? *t : Json::array({*t});
      if (std::find(types.begin(), types.end(), Json("string")) == types.end())
        refuse(path + "/type", "not a string, which this parameter is written as");
    }
    return string_value(s, path, &raw);
  }

  [[noreturn]] void refuse(const std::string& path, const std::string& message) const {
    throw SchemaError(path, message);
  }

  // A keyword that cannot be honoured: refused when strict, else listed and left out.
  void unsupported(const std::string& path, const std::string& keyword, const std::string& why) {
    if (options_.strict) refuse(path, fmt::format("keyword \"{}\" is not supported ({})", keyword, why));
    std::string what = fmt::format("{}: {}", path.empty() ? "#" : path, keyword);
    if (std::find(ignored_.begin(), ignored_.end(), what) == ignored_.end()) ignored_.push_back(std::move(what));
  }

  const Json& resolve(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#')
      refuse(path, fmt::format("$ref \"{}\": only references inside the schema (#...)", ref));
    try {
      return root_.at(Json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      refuse(path, fmt::format("$ref \"{}\" points at nothing", ref));
    }
  }

  int32_t rule_for_ref(const std::string& ref, const std::string& path) {
    if (auto it = rules_.find(ref); it != rules_.end()) return it->second;
    const int32_t rule = builder_.declare(ref);
    rules_[ref] = rule;  // before compiling: a recursive reference calls the rule being defined
    builder_.define(rule, compile(resolve(ref, path), ref == "#" ? "" : ref.substr(1)));
    return rule;
  }

  Expr any_value() {
    if (any_value_ < 0) any_value_ = any_value_rule(builder_, write_);
    return call(any_value_);
  }

  // allOf and $ref siblings: the schemas merged into one (keywords of both; a conflict duet cannot express is
  // refused by name).
  Json merged(Json a, Json b, const std::string& path, int depth = 0) {
    if (depth > 16) refuse(path, "allOf/$ref nested too deeply to merge");
    for (Json* s : {&a, &b}) {
      if (s->is_boolean()) {
        if (!s->get<bool>()) refuse(path, "allOf with a false schema admits nothing");
        *s = Json::object();
      }
      if (s->contains("$ref")) {  // replace the reference by its target, merged with the siblings
        const std::string ref = (*s)["$ref"].get<std::string>();
        Json rest = *s;
        rest.erase("$ref");
        *s = merged(resolve(ref, path), rest, path, depth + 1);
      }
      if (s->contains("allOf")) {
        Json parts = (*s)["allOf"];
        s->erase("allOf");
        for (const Json& p : parts) *s = merged(*s, p, path, depth + 1);
      }
    }
    // additionalProperties: false on one side limits the merged object to that side's property names.
    std::vector<std::vector<std::string>> limits;
    for (const Json* s : {&a, &b}) {
      if (s->value("additionalProperties", Json(true)) != Json(false)) continue;
      std::vector<std::string> names;
      if (s->contains("properties"))
        for (auto p = (*s)["properties"].begin(); p != (*s)["properties"].end(); ++p) names.push_back(p.key());
      limits.push_back(std::move(names));
    }
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = it.value();
      if (kAnnotations.count(k)) continue;
      if (!a.contains(k)) {
        a[k] = v;
      } else if (a[k] == v) {
      } else if (k == "required") {
        for (const Json& name : v)
          if (std::find(a[k].begin(), a[k].end(), name) == a[k].end()) a[k].push_back(name);
      } else if (k == "properties") {
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (!a[k].contains(p.key()))
            a[k][p.key()] = p.value();
          else if (a[k][p.key()] != p.value())
            a[k][p.key()] = Json{{"allOf", Json::array({a[k][p.key()], p.value()})}};
        }
      } else if (k == "type") {
        const auto list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
        Json both = Json::array();
        for (const Json& x : list(a[k]))
          for (const Json& y : list(v)) {
            if (x == y)
              both.push_back(x);
            else if ((x == "integer" && y == "number") || (x == "number" && y == "integer"))
              both.push_back("integer");
          }
        if (both.empty()) refuse(path, "allOf with types that share no value");
        a[k] = both;
      } else if ((k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties") && v.is_number()) {
        a[k] = std::max(a[k].get<double>(), v.get<double>());
      } else if ((k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties") && v.is_number()) {
        a[k] = std::min(a[k].get<double>(), v.get<double>());
      } else {
        refuse(path, fmt::format("allOf with two different \"{}\"", k));
      }
    }
    for (const auto& names : limits) {
      const auto allowed = [&](const std::string& n) {
        return std::find(names.begin(), names.end(), n) != names.end();
      };
      if (a.contains("required"))
        for (const Json& n : a["required"])
          if (!allowed(n.get<std::string>()))
            refuse(path,
                   fmt::format("allOf requires \"{}\" where additionalProperties is false", n.get<std::string>()));
      if (a.contains("properties"))
        for (auto p = a["properties"].begin(); p != a["properties"].end();)
          p = allowed(p.key()) ? std::next(p) : a["properties"].erase(p);
      a["additionalProperties"] = false;
    }
    return a;
  }

  Expr compile_value(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false admits no value");
      return any_value();
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (kAnnotations.count(k) || kObjectWords.count(k) || kArrayWords.count(k) || kStringWords.count(k) ||
          kNumberWords.count(k) || kOtherWords.count(k))
        continue;
      unsupported(path, k, "duet cannot constrain output by it");
    }
    if (const auto ref = lone_ref(s, path)) return call(rule_for_ref(*ref, path));  // a rule: recursion allowed
    const auto combined_value = combined(
        s, path, [&](const Json& whole) { return compile(whole, path); },
        [&](const Json& branch, const std::string& at) { return compile(branch, at); });
    if (combined_value) return *combined_value;
    if (s.contains("enum") || s.contains("const")) return literals(s, path);

    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      for (const Json& name : t->is_array() ? *t : Json::array({*t})) {
        if (!name.is_string()) refuse(path + "/type", "expected a type name or a list of them");
        types.push_back(name.get<std::string>());
      }
      if (types.empty()) refuse(path + "/type", "an empty list of types admits no value");
    } else {
      // No type: the keywords say which one is meant; with none (or several kinds), any value.
      const auto has_any = [&](const std::set<std::string>& words) {
        return std::any_of(words.begin(), words.end(), [&](const std::string& w) { return s.contains(w); });
      };
      const int kinds = has_any(kObjectWords) + has_any(kArrayWords) + has_any(kStringWords) + has_any(kNumberWords);
      if (kinds != 1) return any_value();
      types.push_back(has_any(kObjectWords)   ? "object"
                      : has_any(kArrayWords)  ? "array"
                      : has_any(kStringWords) ? "string"
                                              : "number");
    }
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    std::vector<Expr> parts;
    for (const std::string& type : types) {
      if (type == "string")
        parts.push_back(string_value(s, path));
      else if (type == "integer") {
        if (!has_number) parts.push_back(number_value(s, path, true));
      } else if (type == "number")
        parts.push_back(number_value(s, path, false));
      else if (type == "boolean")
        parts.push_back(alt({literal("true"), literal("false")}));
      else if (type == "null")
        parts.push_back(literal("null"));
      else if (type == "object")
        parts.push_back(object_value(s, path));
      else if (type == "array")
        parts.push_back(array_value(s, path));
      else
        refuse(path + "/type", fmt::format("unknown type \"{}\"", type));
    }
    return parts.size() == 1 ? parts[0] : alt(std::move(parts));
  }

  // enum / const: each value written as compact JSON. Other constraining keywords beside them are refused: a
  // listed value that breaks them would be written anyway.
  Expr literals(const Json& s, const std::string& path) {
    Json values = Json::array();
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) refuse(path + "/enum", "expected a non-empty array");
      for (const Json& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("const") && s.contains("enum")) refuse(path, "both enum and const");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kAnnotations.count(it.key()) && it.key() != "enum" && it.key() != "const" && it.key() != "type")
        unsupported(path, it.key(), "beside enum or const");
    std::vector<Expr> parts;
    for (const Json& v : values) {
      if (s.contains("type") && !type_admits(s["type"], v)) continue;
      parts.push_back(literal(v.dump(-1, ' ', false, Json::error_handler_t::strict)));
    }
    if (parts.empty()) refuse(path, "no enum value has the schema's type");
    return parts.size() == 1 ? parts[0] : alt(std::move(parts));
  }

  static bool type_admits(const Json& type, const Json& v) {
    for (const Json& t : type.is_array() ? type : Json::array({type})) {
      const std::string name = t.get<std::string>();
      if ((name == "string" && v.is_string()) || (name == "boolean" && v.is_boolean()) ||
          (name == "null" && v.is_null()) || (name == "object" && v.is_object()) || (name == "array" && v.is_array()) ||
          (name == "number" && v.is_number()) ||
          (name == "integer" &&
           (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))))
        return true;
    }
    return false;
  }

  int32_t count(const Json& s, const char* key, const std::string& path, int32_t otherwise) {
    if (!s.contains(key)) return otherwise;
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()))
      refuse(path + "/" + key, "expected a non-negative integer");
    if (v.get<double>() > 100000) refuse(path + "/" + key, "counts above 100000 are not supported");
    return static_cast<int32_t>(v.get<double>());
  }

  // A string as JSON (quoted, escaped) or, given `raw`, as raw text.
  Expr string_value(const Json& s, const std::string& path, const RawText* raw = nullptr) {
    const int32_t min = count(s, "minLength", path, 0), max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) refuse(path, "maxLength below minLength admits no string");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string pattern;
    if (s.contains("format")) {
      const std::string format = s["format"].is_string() ? s["format"].get<std::string>() : "";
      if (auto it = kFormats.find(format); it != kFormats.end()) {
        pattern = it->second;
        if (lengths || s.contains("pattern")) unsupported(path, "format", "beside minLength, maxLength or pattern");
      } else {
        unsupported(path, "format", fmt::format("the format \"{}\" is not one duet writes", format));
      }
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse(path + "/pattern", "expected a string");
      if (lengths)
        unsupported(path, "pattern", "beside minLength or maxLength");
      else if (pattern.empty())
        pattern = s["pattern"].get<std::string>();
    }
    if (!pattern.empty()) {
      try {
        return raw ? regex_string_content(pattern, raw->bounded) : json_string(regex_string_content(pattern, write_));
      } catch (const SchemaError&) {
        throw;
      } catch (const Error& e) {
        if (options_.strict) refuse(path + "/pattern", e.what());
        ignored_.push_back(fmt::format("{}: pattern", path.empty() ? "#" : path));
      }
    }
    if (raw) return lengths ? any_string_content(min, max, raw->bounded) : raw->any;
    return json_string(any_string_content(min, max, write_));
  }

  std::optional<Bound> bound(const Json& s, const char* inclusive, const char* exclusive, const std::string& path) {
    std::optional<Bound> out;
    for (const char* key : {inclusive, exclusive}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) refuse(path + "/" + key, "expected a number (draft-04 boolean forms are not supported)");
      const Bound b{s[key].get<double>(), key == exclusive};
      const bool lower = inclusive[1] == 'i';  // "minimum"
      // The tighter of the two when both are given.
      if (!out || (lower ? b.value > out->value || (b.value == out->value && b.exclusive)
                         : b.value < out->value || (b.value == out->value && b.exclusive)))
        out = b;
    }
    return out;
  }

  Expr number_value(const Json& s, const std::string& path, bool integer) {
    if (s.contains("multipleOf")) unsupported(path, "multipleOf", "not expressible here");
    const auto min = bound(s, "minimum", "exclusiveMinimum", path);
    const auto max = bound(s, "maximum", "exclusiveMaximum", path);
    try {
      return integer ? json_integer(min, max) : json_number(min, max);
    } catch (const SchemaError&) {
      throw;
    } catch (const Error& e) {
      refuse(path, e.what());
    }
  }

  Expr object_value(const Json& s, const std::string& path) {
    const Json* properties = s.contains("properties") ? &s["properties"] : nullptr;
    if (properties && !properties->is_object()) refuse(path + "/properties", "expected an object");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(path + "/required", "expected an array of names");
      for (const Json& name : s["required"]) {
        if (!name.is_string()) refuse(path + "/required", "expected an array of names");
        required.push_back(name.get<std::string>());
      }
    }
    const Json additional = s.value("additionalProperties", Json(true));
    const int32_t min_p = count(s, "minProperties", path, 0), max_p = count(s, "maxProperties", path, -1);
    // No named properties: a map whose values follow additionalProperties (any value when absent).
    if ((!properties || properties->empty()) && required.empty()) {
      if (additional.is_boolean() && !additional.get<bool>()) {
        if (min_p > 0) refuse(path, "minProperties with no property allowed");
        return literal("{}");
      }
      const Expr value = additional.is_boolean() ? any_value() : compile(additional, path + "/additionalProperties");
      return json_object_of(value, min_p, max_p, write_);
    }
    if (s.contains("minProperties") || s.contains("maxProperties"))
      unsupported(path, s.contains("minProperties") ? "minProperties" : "maxProperties", "beside properties");
    // Named properties in the schema's order, then required names the properties do not describe (any value).
    struct Member {
      std::string name;
      Expr value;
      bool required;
    };
    std::vector<Member> members;
    if (properties) {
      for (auto it = properties->begin(); it != properties->end(); ++it) {
        const bool needed = std::find(required.begin(), required.end(), it.key()) != required.end();
        members.push_back({it.key(), compile(it.value(), path + "/properties/" + escape_pointer(it.key())), needed});
      }
    }
    for (const std::string& name : required)
      if (!properties || !properties->contains(name)) {
        if (additional.is_boolean() && !additional.get<bool>())
          refuse(path, fmt::format("\"{}\" is required but additionalProperties is false", name));
        members.push_back(
            {name, additional.is_boolean() ? any_value() : compile(additional, path + "/additionalProperties"), true});
      }
    // first[i]: members i.. with none written yet; after[i]: members i.. after one was written (each starts with
    // ','). A required member must be written; an optional one may be skipped.
    const size_t n = members.size();
    std::vector<int32_t> first(n + 1), after(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      first[i] = builder_.declare(fmt::format("{}/members{}", path, i));
      after[i] = builder_.declare(fmt::format("{}/more{}", path, i));
    }
    builder_.define(first[n], empty());
    builder_.define(after[n], empty());
    for (size_t i = n; i-- > 0;) {
      const Member& m = members[i];
      const Expr member = seq({literal(Json(m.name).dump() + ":"), m.value});
      Expr write_first = seq({member, call(after[i + 1])});
      Expr write_after = seq({byte_of(','), member, call(after[i + 1])});
      builder_.define(first[i], m.required ? write_first : alt({write_first, call(first[i + 1])}));
      builder_.define(after[i], m.required ? write_after : alt({write_after, call(after[i + 1])}));
    }
    return seq({byte_of('{'), call(first[0]), byte_of('}')});
  }

  Expr array_value(const Json& s, const std::string& path) {
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) unsupported(path, "uniqueItems", "not expressible");
    std::vector<Expr> prefix;
    Json items = s.value("items", Json(true));
    const Json* prefix_items = s.contains("prefixItems") ? &s["prefixItems"] : nullptr;
    if (items.is_array()) {  // draft-04 tuple form
      prefix_items = &s["items"];
      items = s.value("additionalItems", Json(true));
    }
    if (prefix_items) {
      if (!prefix_items->is_array()) refuse(path + "/prefixItems", "expected an array of schemas");
      for (size_t i = 0; i < prefix_items->size(); ++i)
        prefix.push_back(compile((*prefix_items)[i], fmt::format("{}/prefixItems/{}", path, i)));
    }
    const int32_t min = count(s, "minItems", path, 0);
    int32_t max = count(s, "maxItems", path, -1);
    const bool no_more = items.is_boolean() && !items.get<bool>();
    if (no_more)
      max = max < 0 ? static_cast<int32_t>(prefix.size()) : std::min<int32_t>(max, static_cast<int32_t>(prefix.size()));
    if (max >= 0 && max < min) refuse(path, "minItems above what maxItems and items allow");
    const Expr item = no_more ? nothing() : items.is_boolean() ? any_value() : compile(items, path + "/items");
    const auto element = [&](size_t j) { return j < prefix.size() ? prefix[j] : item; };
    // from(j): elements j.. after j were written. Explicit while a prefix item or minItems still decides; then a
    // repetition of `items`.
    const size_t fixed = std::max(prefix.size(), static_cast<size_t>(min));
    std::function<Expr(size_t)> from = [&](size_t j) -> Expr {
      const Expr sep = j == 0 ? empty() : byte_of(',');
      if (max >= 0 && static_cast<int32_t>(j) >= max) return empty();
      if (j >= fixed) {
        const int32_t left = max < 0 ? -1 : max - static_cast<int32_t>(j);
        if (no_more) return empty();
        if (j == 0) return optional(seq({item, repeat(seq({byte_of(','), item}), 0, left < 0 ? -1 : left - 1)}));
        return repeat(seq({byte_of(','), item}), 0, left);
      }
      const Expr next = seq({sep, element(j), from(j + 1)});
      return static_cast<int32_t>(j) >= min ? optional(next) : next;
    };
    return seq({byte_of('['), from(0), byte_of(']')});
  }

  const Json& root_;
  SchemaOptions options_;
  GrammarBuilder& builder_;
  CharWriter write_;
  int depth_ = 0;
  std::map<std::string, int32_t> rules_;
  int32_t any_value_ = -1;
  std::vector<std::string> ignored_;
};

SchemaGrammar grammar_from_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
  GrammarBuilder builder;
  Compiler compiler(schema, options, builder, json_string_char);
  const int32_t root = compiler.root_rule();
  return {builder.build(root), std::move(compiler.ignored())};
}

SchemaCompiler::SchemaCompiler(const nlohmann::ordered_json& root, const SchemaOptions& options,
                               GrammarBuilder& builder, CharWriter write)
    : impl_(std::make_unique<Compiler>(root, options, builder, std::move(write))) {}
SchemaCompiler::~SchemaCompiler() = default;
Expr SchemaCompiler::value(const nlohmann::ordered_json& schema, const std::string& path) {
  return impl_->compile(schema, path);
}
Expr SchemaCompiler::text(const nlohmann::ordered_json& schema, const std::string& path, const RawText& raw) {
  return impl_->text(schema, path, raw);
}
const std::vector<std::string>& SchemaCompiler::ignored() const { return impl_->ignored(); }

std::optional<std::set<std::string>> admitted_types(const nlohmann::ordered_json& schema,
                                                    const nlohmann::ordered_json& root, int depth) {
  if (schema.is_boolean()) return schema.get<bool>() ? std::nullopt : std::optional<std::set<std::string>>({});
  if (!schema.is_object() || depth > 16) return std::nullopt;
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string() || ref->get<std::string>().empty() || ref->get<std::string>()[0] != '#') return std::nullopt;
    const auto pointer = Json::json_pointer(ref->get<std::string>().substr(1));
    if (!root.contains(pointer)) return std::nullopt;
    return admitted_types(root.at(pointer), root, depth + 1);
  }
  if (auto t = schema.find("type"); t != schema.end()) {
    std::set<std::string> out;
    for (const Json& name : t->is_array() ? *t : Json::array({*t}))
      if (name.is_string()) out.insert(name.get<std::string>());
    return out;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto branches = schema.find(key);
    if (branches == schema.end() || !branches->is_array()) continue;
    std::set<std::string> out;
    for (const Json& b : *branches) {
      auto types = admitted_types(b, root, depth + 1);
      if (!types) return std::nullopt;
      out.insert(types->begin(), types->end());
    }
    return out;
  }
  const auto values = schema.contains("const") ? Json::array({schema["const"]}) : schema.value("enum", Json());
  if (values.is_array()) {
    std::set<std::string> out;
    for (const Json& v : values)
      out.insert(v.is_string()    ? "string"
                 : v.is_number()  ? "number"
                 : v.is_boolean() ? "boolean"
                 : v.is_null()    ? "null"
                 : v.is_array()   ? "array"
                                  : "object");
    return out;
  }
  return std::nullopt;
}

bool admits_string(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root) {
  const auto types = admitted_types(schema, root);
  return !types || types->count("string") > 0;
}

Grammar any_object_grammar() {
  GrammarBuilder builder;
  const int32_t value = any_value_rule(builder);
  const int32_t root = builder.declare("object");
  builder.define(root, json_object_of(call(value)));
  return builder.build(root);
}

}  // namespace duet::grammar
