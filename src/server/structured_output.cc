#include "server/structured_output.h"

#include <algorithm>

#include "grammar/grammar_cache.h"
#include "grammar/terminals.h"
#include "server/errors.h"
#include "server/server_context.h"

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

namespace {

// Compiles or finds a grammar through `compile`, refusing what cannot be honoured at `param`; then binds it to the
// request, from the token after "</think>" when the reply opens inside the reasoning block.
template <typename Compile>
void bind_grammar(ServerContext& context, const std::string& param, engine::Request& request, bool starts_in_reasoning,
                  Compile compile) {
  if (!context.grammars) refuse_field(param, "structured outputs are not available on this server");
  try {
    request.grammar = compile(*context.grammars);
  } catch (const grammar::SchemaError& e) {
    refuse_field(param, e.what());
  } catch (const Error& e) {  // a grammar too large or malformed to build
    refuse_field(param, e.what());
  }
  if (starts_in_reasoning) {
    const auto think_end = context.tokenizer.token_to_id("</think>");
    if (!think_end) refuse_field(param, "the model's template reasons in <think> but has no </think> token");
    request.grammar_after = *think_end;
  }
  ++context.metrics.constrained_requests;
}

}  // namespace

void apply_output_format(ServerContext& context, const OutputFormat& format, engine::Request& request,
                         bool starts_in_reasoning) {
  if (format.kind == OutputFormat::Kind::text) return;
  bind_grammar(context, format.param, request, starts_in_reasoning, [&](grammar::GrammarCache& cache) {
    return format.kind == OutputFormat::Kind::json_object ? cache.for_any_object()
                                                          : cache.for_schema(format.schema, {.strict = format.strict});
  });
}

void apply_tool_call_grammar(ServerContext& context, const Json& tools, const ToolChoice& choice, bool parallel,
                             const OutputFormat& format, engine::Request& request, bool starts_in_reasoning) {
  if (tools.empty() || !(choice.forced() || grammar::has_strict_tool(tools))) return;
  if (format.kind != OutputFormat::Kind::text)
    refuse_field(format.param.substr(0, format.param.find('.')),
                 "a json response format with strict tools or a forced tool call is not supported: the reply follows "
                 "one grammar; send one of the two");
  grammar::ToolCallSpec spec;
  spec.tools = tools;
  spec.parallel = parallel;
  spec.start = choice.mode == ToolChoice::Mode::required   ? grammar::ToolCallSpec::Start::call
               : choice.mode == ToolChoice::Mode::function ? grammar::ToolCallSpec::Start::arguments
                                                           : grammar::ToolCallSpec::Start::reply;
  spec.function = choice.name;
  for (const std::string_view tag : grammar::kTerminalText)
    if (!context.tokenizer.token_to_id(tag)) refuse_field("tools", fmt::format("the model has no {} token", tag));
  bind_grammar(context, "tools", request, starts_in_reasoning,
               [&](grammar::GrammarCache& cache) { return cache.for_tool_calls(spec); });
}

}  // namespace duet::server
