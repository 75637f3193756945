#pragma once
// What a request asked its output to be (chat and completions `response_format`, Responses `text.format`), read and
// checked by name. Reading only: structured_output.h binds it to the engine request as a grammar. Apart so the
// request parsers link (and are fuzzed, tests/fuzz) without the grammar cache and the tokenizer.
#include <string>

#include "server/request_parsing.h"

namespace duet::server {

struct OutputFormat {
  enum class Kind { text, json_object, json_schema } kind = Kind::text;
  Json schema;          // json_schema
  std::string name;     // json_schema's name (reported back nowhere; checked for its type)
  bool strict = false;  // OpenAI's default: keywords duet cannot honour are ignored unless strict
  std::string param;    // where the format was given, for refusals ("response_format", "text.format")
};

// Chat / completions: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema, strict,
// description}}. Refuses (ApiError 400) anything else by name.
OutputFormat parse_response_format(const Json& value, const std::string& param);
// Responses: {"type": "text" | "json_object" | "json_schema", name, schema, strict, description}.
OutputFormat parse_text_format(const Json& value, const std::string& param);

}  // namespace duet::server
