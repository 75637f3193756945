#pragma once
// tool_choice: "auto", "none", "required", or one named function. A required or named call is forced by writing the
// start of the answer into the prompt, after the generation prompt: the tool-call opening tag the model itself writes
// (Qwen3.5's template: "<tool_call>\n<function=NAME>\n<parameter=...") and, for a named function, the name header
// too. The output parser reads that text as the start of the reply, so the call comes back parsed as any other.
// The forced text must start the answer, so the think block is closed (empty) before it: a request that asks for
// thinking itself and forces a call is refused by name; thinking that is only the server's default yields.
#include <optional>
#include <string>

#include "server/request_parsing.h"

namespace duet::server {

struct ToolChoice {
  enum class Mode { automatic, none, required, function };
  Mode mode = Mode::automatic;
  std::string name;  // Mode::function

  bool forced() const { return mode == Mode::required || mode == Mode::function; }
};

// The request's tool_choice; `tools` in the template's shape ({"type": "function", "function": {"name", ...}}).
// Chat names a function as {"type": "function", "function": {"name": X}}, the Responses API as {"type": "function",
// "name": X}. A forced choice without tools, or a name that is not one of them, is refused naming tool_choice.
enum class ToolChoiceShape { chat, responses };
ToolChoice parse_tool_choice(const Json& body, const Json& tools, ToolChoiceShape shape);

// The text that opens the answer: "" (auto, none), "<tool_call>\n" (required), "<tool_call>\n<function=NAME>\n".
std::string forced_answer_start(const ToolChoice& choice);

// Whether the template renders with thinking: what the request asked (nullopt: it said nothing), else the server's
// default; a forced call renders without it (refused when the request asked for thinking itself).
bool thinking_with(const ToolChoice& choice, std::optional<bool> asked, bool server_default);

}  // namespace duet::server
