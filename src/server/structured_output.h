#pragma once
// Structured outputs on the OpenAI routes: what a request asked its output to be (chat and completions
// `response_format`, Responses `text.format`), read and checked by name, then bound to the engine request as a
// compiled grammar (grammar/grammar_cache.h) so every sampled token keeps the output a prefix of a valid document.
#include <memory>
#include <string>

#include "engine/request.h"
#include "server/request_parsing.h"
#include "server/tool_choice.h"

namespace duet::grammar {
class GrammarCache;
}

namespace duet::server {

struct ServerContext;

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

// Binds a json format to `request` (nothing for text): compiles or finds its grammar (400 naming the schema path of
// what cannot be honoured). `starts_in_reasoning`: the reply opens inside <think>, so the grammar holds from the
// token after "</think>".
void apply_output_format(ServerContext& context, const OutputFormat& format, engine::Request& request,
                         bool starts_in_reasoning);

// Holds the reply's tool calls to their tools' schemas (grammar/tool_call_grammar.h) when the request asks for it: a
// function with "strict": true among `tools` (the reply is free text, then calls or nothing), or a forced call
// (tool_choice required or named: the grammar starts where the prompt's forced text ends). Refused beside a json
// response format (a reply follows one grammar). `tools` in the template's shape.
void apply_tool_call_grammar(ServerContext& context, const Json& tools, const ToolChoice& choice, bool parallel,
                             const OutputFormat& format, engine::Request& request, bool starts_in_reasoning);

}  // namespace duet::server
