#include "server/structured_output.h"

#include "grammar/grammar_cache.h"
#include "grammar/terminals.h"
#include "server/errors.h"
#include "server/server_context.h"

namespace duet::server {
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
