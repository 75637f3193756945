#include "server/tool_choice.h"

#include <fmt/format.h>

#include "server/errors.h"

namespace duet::server {
namespace {

bool offers(const Json& tools, const std::string& name) {
  for (const Json& tool : tools)
    if (tool.at("function").value("name", std::string()) == name) return true;
  return false;
}

// The named function of a {"type": "function", ...} object, as the route's shape places it.
std::string function_name(const Json& choice, ToolChoiceShape shape) {
  if (read_string(choice, "type", "tool_choice.type") != "function")
    refuse_field("tool_choice.type", "only function tool choices are supported");
  if (shape == ToolChoiceShape::responses) {
    auto name = read_string(choice, "name", "tool_choice.name");
    if (!name || name->empty()) refuse_field("tool_choice.name", "missing");
    return *name;
  }
  auto function = choice.find("function");
  if (function == choice.end() || !function->is_object()) refuse_field("tool_choice.function", "expected an object");
  auto name = read_string(*function, "name", "tool_choice.function.name");
  if (!name || name->empty()) refuse_field("tool_choice.function.name", "missing");
  return *name;
}

}  // namespace

ToolChoice parse_tool_choice(const Json& body, const Json& tools, ToolChoiceShape shape) {
  ToolChoice choice;
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return choice;
  if (it->is_string()) {
    const std::string mode = it->get<std::string>();
    if (mode == "auto") return choice;
    if (mode == "none")
      choice.mode = ToolChoice::Mode::none;
    else if (mode == "required")
      choice.mode = ToolChoice::Mode::required;
    else
      refuse_field("tool_choice", fmt::format("`{}` is not one of auto, none, required (or a function object)", mode));
  } else if (it->is_object()) {
    choice.mode = ToolChoice::Mode::function;
    choice.name = function_name(*it, shape);
  } else {
    refuse_field("tool_choice", "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
  }
  if (choice.forced() && tools.empty()) refuse_field("tool_choice", "forces a tool call, but no tools were given");
  // The name is written into the prompt inside the tag, as the template writes a call's name.
  if (choice.name.find_first_of("<>\n") != std::string::npos)
    refuse_field("tool_choice", "a function name holding <, > or a line break cannot be forced");
  if (choice.mode == ToolChoice::Mode::function && !offers(tools, choice.name))
    refuse_field("tool_choice", fmt::format("names the function `{}`, which is not one of the tools", choice.name));
  return choice;
}

std::string forced_answer_start(const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::required) return "<tool_call>\n";
  if (choice.mode == ToolChoice::Mode::function) return "<tool_call>\n<function=" + choice.name + ">\n";
  return {};
}

bool thinking_with(const ToolChoice& choice, std::optional<bool> asked, bool server_default) {
  if (!choice.forced()) return asked.value_or(server_default);
  // A forced call is written where the answer starts; a reasoning model's answer starts after its reasoning, which
  // a prompt cannot wait for. Reasoning the client asked for is not dropped silently.
  if (asked.value_or(false))
    refuse_field("tool_choice",
                 "a forced tool call (required or a named function) starts the answer at once, without reasoning; "
                 "turn thinking off for this request (reasoning effort `none`, or chat_template_kwargs."
                 "enable_thinking false) or use tool_choice auto");
  return false;
}

}  // namespace duet::server
