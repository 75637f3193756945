#pragma once
// Tool calls held to their tools' JSON schemas, in the form Qwen3.5's template writes and the server's output parser
// reads (server/tool_call_parser.h):
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// "<tool_call>" and "</tool_call>" are the tokenizer's added tokens, written as single-token terminals (terminals.h).
// A parameter whose schema admits a string is written as raw text (the template writes strings unquoted and the
// parser keeps such values as strings); any other as compact JSON. Properties come in the schema's order, the
// required ones always, no others. Raw text never spells a tag that ends a value, and JSON strings inside a
// parameter hold no '<', so the parser never cuts a value short.
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/json_schema.h"

namespace duet::grammar {

struct ToolCallSpec {
  // The chat shape: [{"type": "function", "function": {"name", "parameters", "strict"}}]. A tool's arguments follow
  // its parameters schema; keywords duet cannot honour are refused for a strict tool and ignored for the others.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  // Where the grammar starts: the reply's free text, then calls or nothing (some tool is strict, tool_choice auto);
  // right after "<tool_call>\n" (tool_choice required: the prompt wrote it); right after
  // "<tool_call>\n<function=NAME>\n" (a named function).
  enum class Start { reply, call, arguments } start = Start::reply;
  std::string function;  // Start::arguments
  bool parallel = true;  // more calls may follow the first (of the named function only, for Start::arguments)
};

// Throws SchemaError with the path "tools[i].function.parameters/..." of what cannot be honoured.
SchemaGrammar tool_call_grammar(const ToolCallSpec& spec);

// Whether the parameter `name` of a tool whose parameters schema is `parameters` is written as raw text (its schema
// admits a string, or says nothing of a type) rather than as JSON: the grammar and the output parser agree on it.
bool parameter_written_as_text(const nlohmann::ordered_json& parameters, const std::string& name);

// Whether a request's tools ask for their calls to be held to the schemas (some function has "strict": true).
bool has_strict_tool(const nlohmann::ordered_json& tools);

}  // namespace duet::grammar
