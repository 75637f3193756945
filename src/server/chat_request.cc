#include "server/chat_request.h"

#include <fmt/format.h>

#include "server/errors.h"
#include "server/image_parts.h"
#include "server/system_messages.h"

namespace duet::server {
namespace {

// content: a string, null, or an array of {"type": "text", "text": ...} parts (joined), and, where `images` is given,
// `image_url` parts: each rendered as the template renders an image (image_parts.h) and added to `images` in order.
// The template refuses images in a system message, and so does this.
std::string message_content(const Json& message, const std::string& name, const std::string& role,
                            IgnoredFields& unknown, std::vector<ImagePart>* images) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) refuse_field(name + ".content", "expected a string or an array of text parts");
  std::string text;
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    std::string part_name = fmt::format("{}.content[{}]", name, j);
    if (!part.is_object()) refuse_field(part_name, "expected a content part object");
    auto type = read_string(part, "type", part_name + ".type");
    if (!type) refuse_field(part_name + ".type", "missing");
    if (*type == "image_url" && images != nullptr) {
      refuse_image_in_system(role, part_name);
      images->push_back(parse_image_part(part, part_name, unknown));
      text += kImageMarkup;
      continue;
    }
    if (*type != "text")
      refuse_field(part_name + ".type",
                   fmt::format("`{}` parts are not supported {}", *type,
                               images != nullptr ? "; only text and image_url" : "here; only text"));
    // cache_control is Anthropic-style prompt caching that OpenAI-compatible clients pass through: no effect here.
    check_known_fields(part, {"type", "text"}, {"cache_control"}, part_name + ".", unknown);
    auto part_text = read_string(part, "text", part_name + ".text");
    if (!part_text) refuse_field(part_name + ".text", "missing");
    text += *part_text;
  }
  return text;
}

std::vector<tokenizer::ToolCall> message_tool_calls(const Json& message, const std::string& name) {
  std::vector<tokenizer::ToolCall> calls;
  auto it = message.find("tool_calls");
  if (it == message.end() || it->is_null()) return calls;
  if (!it->is_array()) refuse_field(name + ".tool_calls", "expected an array");
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& call = (*it)[j];
    std::string call_name = fmt::format("{}.tool_calls[{}]", name, j);
    if (!call.is_object()) refuse_field(call_name, "expected an object");
    if (auto type = read_string(call, "type", call_name + ".type"); type && *type != "function")
      refuse_field(call_name + ".type", "only function tool calls are supported");
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) refuse_field(call_name + ".function", "expected an object");
    auto function_name = read_string(*function, "name", call_name + ".function.name");
    if (!function_name || function_name->empty()) refuse_field(call_name + ".function.name", "missing");
    tokenizer::ToolCall parsed{*function_name, Json::object()};
    auto arguments = function->find("arguments");
    if (arguments != function->end() && !arguments->is_null()) {
      // OpenAI sends arguments as a JSON string; accept an object too.
      const std::string param = call_name + ".function.arguments";
      if (arguments->is_string())
        parsed.arguments = parse_arguments_text(arguments->get_ref<const std::string&>(), param);
      else if (arguments->is_object())
        parsed.arguments = *arguments;
      else
        refuse_field(param, "expected a JSON object (as a string)");
    }
    calls.push_back(std::move(parsed));
  }
  return calls;
}

}  // namespace

std::vector<tokenizer::ChatMessage> parse_chat_messages(const Json& body, IgnoredFields& unknown,
                                                        std::vector<ImagePart>* images) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) refuse_field("messages", "missing");
  if (!it->is_array()) refuse_field("messages", "expected an array of messages");
  if (it->empty()) refuse_field("messages", "must contain at least one message");
  std::vector<tokenizer::ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& message = (*it)[i];
    std::string name = fmt::format("messages[{}]", i);
    if (!message.is_object()) refuse_field(name, "expected an object");
    // name, tool_call_id, refusal and annotations carry nothing the template uses (clients echo them back);
    // audio and function_call (the deprecated single call) are accepted as null only.
    check_known_fields(message, {"role", "content", "tool_calls", "reasoning_content", "audio", "function_call"},
                       {"name", "tool_call_id", "refusal", "annotations"}, name + ".", unknown);
    refuse_if_present(message, "audio", "audio messages are not supported; send text", name + ".");
    refuse_if_present(message, "function_call", "the deprecated function_call is not supported; send tool_calls",
                      name + ".");
    auto role = read_string(message, "role", name + ".role");
    if (!role) refuse_field(name + ".role", "missing");
    tokenizer::ChatMessage parsed;
    if (*role == "developer")
      parsed.role = "system";  // OpenAI's newer name for the system role
    else if (*role == "system" || *role == "user" || *role == "assistant" || *role == "tool")
      parsed.role = *role;
    else
      refuse_field(name + ".role", fmt::format("`{}` is not one of system, developer, user, assistant, tool", *role));
    parsed.content = message_content(message, name, *role, unknown, images);
    if (parsed.role == "assistant") {
      parsed.reasoning_content = read_string(message, "reasoning_content", name + ".reasoning_content");
      parsed.tool_calls = message_tool_calls(message, name);
    } else {
      if (message.contains("tool_calls") && !message["tool_calls"].is_null())
        refuse_field(name + ".tool_calls", "only assistant messages carry tool calls");
      if (message.contains("reasoning_content") && !message["reasoning_content"].is_null())
        refuse_field(name + ".reasoning_content", "only assistant messages carry reasoning");
    }
    messages.push_back(std::move(parsed));
  }
  join_leading_system_messages(messages);
  return messages;
}

Json parse_tools(const Json& body) {
  Json tools = Json::array();
  if (const Json* it = read_tools(body)) {
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& tool = (*it)[i];
      std::string name = fmt::format("tools[{}]", i);
      if (!tool.is_object()) refuse_field(name, "expected an object");
      auto type = read_string(tool, "type", name + ".type");
      if (!type || *type != "function") refuse_field(name + ".type", "only `function` tools are supported");
      auto function = tool.find("function");
      if (function == tool.end() || !function->is_object()) refuse_field(name + ".function", "expected an object");
      auto function_name = read_string(*function, "name", name + ".function.name");
      if (!function_name || function_name->empty()) refuse_field(name + ".function.name", "missing");
      if (auto params = function->find("parameters");
          params != function->end() && !params->is_null() && !params->is_object())
        refuse_field(name + ".function.parameters", "expected a JSON schema object");
      read_string(*function, "description", name + ".function.description");
    }
    tools = *it;
  }
  return tools;
}

namespace {
// chat_template_kwargs.enable_thinking; nullopt when not sent.
std::optional<bool> template_thinking(const Json& body, IgnoredFields& unknown) {
  auto it = body.find("chat_template_kwargs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) refuse_field("chat_template_kwargs", "expected an object");
  check_known_fields(*it, {"enable_thinking"}, {}, "chat_template_kwargs.", unknown);
  return read_bool(*it, "enable_thinking", "chat_template_kwargs.enable_thinking");
}

// reasoning_effort as the template's thinking switch: "none" renders without reasoning, any effort with it
// (Qwen3.5 has no budget levels). chat_template_kwargs.enable_thinking, when sent, decides instead. nullopt: the
// request asked nothing (the server's default applies).
std::optional<bool> asked_thinking(const Json& body, IgnoredFields& unknown) {
  std::optional<bool> thinking;
  if (auto effort = read_string(body, "reasoning_effort", "reasoning_effort")) {
    if (*effort == "none")
      thinking = false;
    else if (*effort == "minimal" || *effort == "low" || *effort == "medium" || *effort == "high" || *effort == "xhigh")
      thinking = true;
    else
      refuse_field("reasoning_effort",
                   fmt::format("`{}` is not one of none, minimal, low, medium, high, xhigh", *effort));
  }
  if (auto asked = template_thinking(body, unknown)) thinking = asked;
  return thinking;
}
}  // namespace

bool parse_enable_thinking(const Json& body, bool default_value, IgnoredFields& unknown) {
  return template_thinking(body, unknown).value_or(default_value);
}

// The fields OpenAI documents that change nothing here, checked for their type so a wrong one is still named.
void check_fields_without_effect(const Json& body) {
  if (auto verbosity = read_string(body, "verbosity", "verbosity");
      verbosity && *verbosity != "low" && *verbosity != "medium" && *verbosity != "high")
    refuse_field("verbosity", "must be low, medium or high");
  if (auto it = body.find("modalities"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) refuse_field("modalities", "expected an array");
    for (size_t i = 0; i < it->size(); ++i)
      if ((*it)[i] != "text") refuse_field(fmt::format("modalities[{}]", i), "only \"text\" output is supported");
  }
  read_bool(body, "store", "store");
  read_string(body, "service_tier", "service_tier");
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null() && !it->is_object())
    refuse_field("metadata", "expected an object");
}

// OpenAI fields that would change the answer in ways duet cannot give: refused by name, never ignored.
void refuse_unsupported(const Json& body) {
  refuse_if_present(body, "audio", "audio output is not supported");
  refuse_if_present(body, "prediction", "predicted outputs are not supported");
  refuse_if_present(body, "web_search_options", "web search is not supported");
  refuse_if_present(body, "functions", "the deprecated functions field is not supported; send tools");
  refuse_if_present(body, "function_call", "the deprecated function_call field is not supported; send tool_choice");
}

ChatRequest parse_chat_request(const Json& body, const ServerOptions& options) {
  ChatRequest request;
  check_generation_fields(
      body,
      {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "chat_template_kwargs",
       "response_format", "reasoning_effort", "parallel_tool_calls", "user", "safety_identifier", "prompt_cache_key",
       "audio", "prediction", "web_search_options", "functions", "function_call"},
      {"metadata", "store", "service_tier", "verbosity", "modalities"}, request.ignored);
  check_model(body, options.served_model_name);
  refuse_unsupported(body);
  check_fields_without_effect(body);
  request.messages = parse_chat_messages(body, request.ignored, &request.images);
  request.tools = parse_tools(body);
  request.tool_choice = parse_tool_choice(body, request.tools, ToolChoiceShape::chat);
  if (request.tool_choice.mode == ToolChoice::Mode::none) request.tools = Json::array();  // not shown to the model
  request.enable_thinking =
      thinking_with(request.tool_choice, asked_thinking(body, request.ignored), options.enable_thinking);
  request.parallel_tool_calls = read_bool(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
  request.client = parse_client_tags(body);
  request.sampling = parse_sampling(body);
  request.stream = parse_stream(body, request.ignored);
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null())
    request.format = parse_response_format(*it, "response_format");
  request.logprobs = read_bool(body, "logprobs", "logprobs").value_or(false);
  if (auto top = read_integer(body, "top_logprobs", "top_logprobs", 0, 20)) {
    if (!request.logprobs) refuse_field("top_logprobs", "needs logprobs: true");
    request.top_logprobs = static_cast<int32_t>(*top);
  }
  request.sampling.params.top_logprobs = request.logprobs ? request.top_logprobs : -1;
  return request;
}

}  // namespace duet::server
