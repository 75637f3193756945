#include "server/output_format.h"

#include <algorithm>

#include "server/errors.h"

namespace duet::server {

namespace {

OutputFormat read_format(const Json& value, const std::string& param, bool nested_schema) {
  if (!value.is_object()) refuse_field(param, "expected an object with a type");
  OutputFormat format;
  format.param = param;
  const auto type = value.find("type");
  if (type == value.end() || !type->is_string())
    refuse_field(param + ".type", "expected text, json_object or json_schema");
  const std::string kind = type->get<std::string>();
  const auto only = [&](std::initializer_list<const char*> keys) {
    for (auto it = value.begin(); it != value.end(); ++it)
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }))
        refuse_field(param + "." + it.key(), "unknown field for type " + kind);
  };
  if (kind == "text") {
    only({"type"});
    return format;
  }
  if (kind == "json_object") {
    only({"type"});
    format.kind = OutputFormat::Kind::json_object;
    return format;
  }
  if (kind != "json_schema") refuse_field(param + ".type", "expected text, json_object or json_schema");
  format.kind = OutputFormat::Kind::json_schema;
  const Json* spec = &value;
  std::string at = param;
  if (nested_schema) {
    only({"type", "json_schema"});
    const auto it = value.find("json_schema");
    if (it == value.end() || !it->is_object()) refuse_field(param + ".json_schema", "expected an object with a schema");
    spec = &*it;
    at = param + ".json_schema";
  } else {
    only({"type", "name", "schema", "strict", "description"});
  }
  for (auto it = spec->begin(); it != spec->end(); ++it)
    if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" && it.key() != "description" &&
        it.key() != "type")
      refuse_field(at + "." + it.key(), "unknown field");
  if (auto name = spec->find("name"); name != spec->end() && !name->is_string())
    refuse_field(at + ".name", "expected a string");
  format.name = spec->value("name", "");
  if (auto strict = spec->find("strict"); strict != spec->end() && !strict->is_null()) {
    if (!strict->is_boolean()) refuse_field(at + ".strict", "expected a boolean");
    format.strict = strict->get<bool>();
  }
  const auto schema = spec->find("schema");
  if (schema == spec->end() || !(schema->is_object() || schema->is_boolean()))
    refuse_field(at + ".schema", "expected a JSON Schema object");
  format.schema = *schema;
  format.param = at + ".schema";
  return format;
}

}  // namespace

OutputFormat parse_response_format(const Json& value, const std::string& param) {
  return read_format(value, param, true);
}
OutputFormat parse_text_format(const Json& value, const std::string& param) { return read_format(value, param, false); }

}  // namespace duet::server
