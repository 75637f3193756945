#pragma once
// Structured outputs on the OpenAI routes: what a request asked its output to be (output_format.h), bound to the
// engine request as a compiled grammar (grammar/grammar_cache.h) so every sampled token keeps the output a prefix of
// a valid document.
#include <memory>
#include <string>

#include "engine/request.h"
#include "server/output_format.h"
#include "server/request_parsing.h"
#include "server/tool_choice.h"

namespace duet::grammar {
class GrammarCache;
}

namespace duet::server {

struct ServerContext;

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
