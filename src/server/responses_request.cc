#include "server/responses_request.h"

#include <fmt/format.h>

#include "server/errors.h"
#include "server/system_messages.h"

namespace duet::server {
namespace {

// input_text / output_text parts (or a plain string) joined, as the chat route joins text parts, and input_image parts
// rendered as the template renders an image and added to `images` in order, as the chat route's image_url parts
// (image_parts.h; refused in a system message, as there).
std::string item_text(const Json& item, const std::string& name, const std::string& role, IgnoredFields& unknown,
                      std::vector<ImagePart>& images) {
  auto it = item.find("content");
  if (it == item.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) refuse_field(name + ".content", "expected a string or an array of content parts");
  std::string text;
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    const std::string part_name = fmt::format("{}.content[{}]", name, j);
    if (!part.is_object()) refuse_field(part_name, "expected a content part object");
    auto type = read_string(part, "type", part_name + ".type");
    if (type == "input_image") {
      refuse_image_in_system(role, part_name);
      images.push_back(parse_input_image(part, part_name, unknown));
      text += kImageMarkup;
      continue;
    }
    if (!type || (*type != "input_text" && *type != "output_text" && *type != "text"))
      refuse_field(part_name + ".type", "only input_text, output_text and input_image parts are supported");
    check_known_fields(part, {"type", "text"}, {"annotations", "logprobs", "cache_control"}, part_name + ".", unknown);
    text += read_string(part, "text", part_name + ".text").value_or("");
  }
  return text;
}

// The assistant turn a function_call item belongs to: the previous assistant message, or a new one.
tokenizer::ChatMessage& assistant_turn(std::vector<tokenizer::ChatMessage>& messages) {
  if (messages.empty() || messages.back().role != "assistant") messages.push_back({"assistant", "", std::nullopt, {}});
  return messages.back();
}

void add_input_item(std::vector<tokenizer::ChatMessage>& messages, const Json& item, const std::string& name,
                    IgnoredFields& unknown, std::vector<ImagePart>& images) {
  if (!item.is_object()) refuse_field(name, "expected an input item object");
  const std::string type = read_string(item, "type", name + ".type").value_or("message");
  if (type == "message") {
    check_known_fields(item, {"type", "role", "content"}, {"id", "status"}, name + ".", unknown);
    auto role = read_string(item, "role", name + ".role");
    if (!role) refuse_field(name + ".role", "missing");
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")
      refuse_field(name + ".role", fmt::format("`{}` is not one of user, assistant, system, developer", *role));
    messages.push_back(
        {*role == "developer" ? "system" : *role, item_text(item, name, *role, unknown, images), std::nullopt, {}});
  } else if (type == "function_call") {
    check_known_fields(item, {"type", "name", "arguments", "call_id"}, {"id", "status"}, name + ".", unknown);
    auto function_name = read_string(item, "name", name + ".name");
    if (!function_name || function_name->empty()) refuse_field(name + ".name", "missing");
    // Parsed here, so that a refusal names this item rather than the chat message it becomes.
    Json arguments =
        parse_arguments_text(read_string(item, "arguments", name + ".arguments").value_or("{}"), name + ".arguments");
    assistant_turn(messages).tool_calls.push_back({*function_name, std::move(arguments)});
  } else if (type == "function_call_output") {
    check_known_fields(item, {"type", "call_id", "output"}, {"id", "status"}, name + ".", unknown);
    auto output = item.find("output");
    std::string text;
    if (output != item.end() && output->is_string())
      text = output->get<std::string>();
    else if (output != item.end() && output->is_array())
      text = item_text({{"content", *output}}, name + ".output", "tool", unknown, images);
    else if (output != item.end() && !output->is_null())
      refuse_field(name + ".output", "expected a string or an array of text parts");
    messages.push_back({"tool", std::move(text), std::nullopt, {}});
  } else if (type == "reasoning") {
    // Earlier reasoning: the template drops it from past turns anyway, so it is accepted and not shown.
    check_known_fields(item, {"type"}, {"id", "summary", "content", "encrypted_content", "status"}, name + ".",
                       unknown);
  } else if (type == "item_reference") {
    refuse_field(name + ".type", "not resolved against the stored responses");
  } else {
    refuse_field(name + ".type", fmt::format("`{}` items are not supported", type));
  }
}

std::vector<tokenizer::ChatMessage> parse_input(const Json& body, IgnoredFields& unknown,
                                                std::vector<ImagePart>& images) {
  std::vector<tokenizer::ChatMessage> messages;
  if (auto instructions = read_string(body, "instructions", "instructions"))
    messages.push_back({"system", *instructions, std::nullopt, {}});
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) refuse_field("input", "missing");
  if (it->is_string()) {
    messages.push_back({"user", it->get<std::string>(), std::nullopt, {}});
  } else if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string name = fmt::format("input[{}]", i);
      add_input_item(messages, (*it)[i], name, unknown, images);
    }
  } else {
    refuse_field("input", "expected a string or an array of input items");
  }
  join_leading_system_messages(messages);
  return messages;
}

// Responses function tools are flat ({type, name, description, parameters, strict}); the template takes the Chat
// Completions shape. The client's order of name, description and parameters is kept.
Json parse_function_tools(const Json& body, IgnoredFields& unknown) {
  Json tools = Json::array();
  const Json* it = read_tools(body);
  if (it == nullptr) return tools;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& tool = (*it)[i];
    const std::string name = fmt::format("tools[{}]", i);
    if (!tool.is_object()) refuse_field(name, "expected an object");
    if (read_string(tool, "type", name + ".type") != "function")
      refuse_field(name + ".type", "only `function` tools are supported (no built-in tools)");
    check_known_fields(tool, {"type", "name", "description", "parameters"}, {"strict"}, name + ".", unknown);
    auto function_name = read_string(tool, "name", name + ".name");
    if (!function_name || function_name->empty()) refuse_field(name + ".name", "missing");
    read_string(tool, "description", name + ".description");
    Json function = Json::object();
    for (auto member = tool.begin(); member != tool.end(); ++member) {
      if (member.key() == "type" || member.key() == "strict" || member->is_null()) continue;
      if (member.key() == "parameters" && !member->is_object())
        refuse_field(name + ".parameters", "expected a JSON schema object");
      function[member.key()] = *member;
    }
    tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return tools;
}

// reasoning.summary (or its older name generate_summary): whether the reasoning goes out as summary text. Qwen3.5
// writes no separate summary, so every level sends the reasoning itself.
bool parse_reasoning_summary(const Json& body) {
  auto it = body.find("reasoning");
  if (it == body.end() || !it->is_object()) return false;
  bool asked = false;
  for (const char* key : {"summary", "generate_summary"}) {
    const std::string param = std::string("reasoning.") + key;
    auto level = read_string(*it, key, param);
    if (!level) continue;
    if (*level != "auto" && *level != "concise" && *level != "detailed")
      refuse_field(param, fmt::format("`{}` is not one of auto, concise, detailed", *level));
    asked = true;
  }
  return asked;
}

// reasoning.effort as the thinking switch (as reasoning_effort on chat). nullopt: the request asked nothing (the
// server's default applies).
std::optional<bool> parse_reasoning(const Json& body, IgnoredFields& unknown) {
  auto it = body.find("reasoning");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) refuse_field("reasoning", "expected an object");
  check_known_fields(*it, {"effort", "summary", "generate_summary"}, {}, "reasoning.", unknown);
  auto effort = read_string(*it, "effort", "reasoning.effort");
  if (!effort) return std::nullopt;
  if (*effort == "none") return false;
  if (*effort == "minimal" || *effort == "low" || *effort == "medium" || *effort == "high" || *effort == "xhigh")
    return true;
  refuse_field("reasoning.effort", fmt::format("`{}` is not one of none, minimal, low, medium, high, xhigh", *effort));
}

OutputFormat read_text_format(const Json& body, IgnoredFields& unknown) {
  auto it = body.find("text");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object()) refuse_field("text", "expected an object");
  check_known_fields(*it, {"format"}, {"verbosity"}, "text.", unknown);
  if (auto format = it->find("format"); format != it->end() && !format->is_null())
    return parse_text_format(*format, "text.format");
  return {};
}

// What needs state duet does not keep, refused by name rather than ignored. previous_response_id and item
// references are resolved against stored responses before the body gets here (responses_state.h).
void refuse_state(const Json& body) {
  if (read_string(body, "previous_response_id", "previous_response_id"))
    refuse_field("previous_response_id", "not resolved against the stored responses");
  read_bool(body, "store", "store");
  if (auto it = body.find("conversation"); it != body.end() && !it->is_null())
    refuse_field("conversation", "duet keeps no conversations; send the whole conversation in `input`");
  if (read_bool(body, "background", "background").value_or(false))
    refuse_field("background", "background responses need stored state; duet answers in the foreground");
}

}  // namespace

ResponsesRequest parse_responses_request(const Json& body, const ServerOptions& options) {
  ResponsesRequest request;
  check_known_fields(body,
                     {"model",
                      "input",
                      "instructions",
                      "tools",
                      "tool_choice",
                      "max_output_tokens",
                      "temperature",
                      "top_p",
                      "reasoning",
                      "text",
                      "stream",
                      "store",
                      "previous_response_id",
                      "parallel_tool_calls",
                      "user",
                      "safety_identifier",
                      "prompt_cache_key",
                      "background",
                      "conversation",
                      "ignore_eos"},
                     {"metadata", "service_tier", "include", "truncation", "stream_options", "max_tool_calls"}, {},
                     request.ignored);
  check_model(body, options.served_model_name);
  refuse_state(body);
  request.format = read_text_format(body, request.ignored);
  if (auto truncation = read_string(body, "truncation", "truncation"); truncation && *truncation != "disabled")
    refuse_field("truncation", "only \"disabled\": a prompt over the context is refused, never cut");
  request.messages = parse_input(body, request.ignored, request.images);
  request.tools = parse_function_tools(body, request.ignored);
  request.tool_choice = parse_tool_choice(body, request.tools, ToolChoiceShape::responses);
  if (request.tool_choice.mode == ToolChoice::Mode::none) request.tools = Json::array();
  request.enable_thinking =
      thinking_with(request.tool_choice, parse_reasoning(body, request.ignored), options.enable_thinking);
  request.reasoning_summary = parse_reasoning_summary(body);
  request.parallel_tool_calls = read_bool(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
  request.stream = read_bool(body, "stream", "stream").value_or(false);
  request.client = parse_client_tags(body);
  request.sampling = parse_sampling(body);  // temperature, top_p (the field check let no other sampling field in)
  request.sampling.max_tokens =
      read_integer(body, "max_output_tokens", "max_output_tokens", 1, std::numeric_limits<int32_t>::max());
  for (const char* key : {"instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p",
                          "parallel_tool_calls", "metadata", "user", "text", "reasoning", "truncation"})
    if (auto it = body.find(key); it != body.end()) request.echo[key] = *it;
  return request;
}

}  // namespace duet::server
