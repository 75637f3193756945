#include "server/messages_request.h"

#include <fmt/format.h>

#include "server/errors.h"
#include "server/system_messages.h"

namespace duet::server {
namespace {

// Claude Code (2.1.29 and later) opens `system` with a block "x-anthropic-billing-header: cc_version=...; cch=...;"
// whose hash changes with every request. It means nothing to the model, and at the very start of the prompt it made
// every request's prefix new: the prompt cache could resume nothing of the 17K-token prompt that follows, identical
// from request to request (seen in tests/server/coding_agent_e2e_test.cc's control). `system` leaves such a block
// out, as llama.cpp and others do.
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header:";

// A content field: a string, or blocks of which only `text` ones are read here (system), and `image` ones where
// `images` is given (tool results): rendered as the template renders an image and added to `images` in order.
std::string text_of(const Json& content, const std::string& name, IgnoredFields& unknown,
                    bool without_billing_header = false, std::vector<ImagePart>* images = nullptr) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse_field(name, "expected a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string block_name = fmt::format("{}[{}]", name, i);
    const Json& block = content[i];
    if (!block.is_object()) refuse_field(block_name, "expected a content block object");
    const auto type = read_string(block, "type", block_name + ".type");
    if (type == "image" && images != nullptr) {
      images->push_back(parse_image_block(block, block_name, unknown));
      text += kImageMarkup;
      continue;
    }
    if (type != "text")
      refuse_field(block_name + ".type", images != nullptr ? "only text and image blocks are supported here"
                                                           : "only text blocks are supported here");
    check_known_fields(block, {"type", "text"}, {"cache_control", "citations"}, block_name + ".", unknown);
    const std::string part = read_string(block, "text", block_name + ".text").value_or("");
    if (without_billing_header && part.starts_with(kBillingHeader)) continue;
    text += part;
  }
  return text;
}

// A user turn: its tool_result blocks become tool turns (first, as Anthropic places them), its text and image blocks
// one user turn. `images` gets the images in the order the template renders them: the tool turns' first.
void add_user_turn(std::vector<tokenizer::ChatMessage>& messages, const Json& content, const std::string& name,
                   IgnoredFields& unknown, std::vector<ImagePart>& images) {
  if (content.is_string()) {
    messages.push_back({"user", content.get<std::string>(), std::nullopt, {}});
    return;
  }
  if (!content.is_array()) refuse_field(name + ".content", "expected a string or an array of content blocks");
  std::string text;
  std::vector<ImagePart> turn_images;
  bool has_content = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string block_name = fmt::format("{}.content[{}]", name, i);
    const Json& block = content[i];
    if (!block.is_object()) refuse_field(block_name, "expected a content block object");
    const std::string type = read_string(block, "type", block_name + ".type").value_or("");
    if (type == "text") {
      check_known_fields(block, {"type", "text"}, {"cache_control", "citations"}, block_name + ".", unknown);
      text += read_string(block, "text", block_name + ".text").value_or("");
      has_content = true;
    } else if (type == "image") {
      turn_images.push_back(parse_image_block(block, block_name, unknown));
      text += kImageMarkup;
      has_content = true;
    } else if (type == "tool_result") {
      check_known_fields(block, {"type", "tool_use_id", "content"}, {"is_error", "cache_control"}, block_name + ".",
                         unknown);
      read_bool(block, "is_error", block_name + ".is_error");
      auto result = block.find("content");
      messages.push_back(
          {"tool",
           result == block.end() ? "" : text_of(*result, block_name + ".content", unknown, false, &images),
           std::nullopt,
           {}});
    } else {
      refuse_field(block_name + ".type", fmt::format("`{}` blocks are not supported in user turns; send text, image "
                                                     "and tool_result blocks",
                                                     type));
    }
  }
  if (!has_content) return;
  messages.push_back({"user", std::move(text), std::nullopt, {}});
  for (ImagePart& image : turn_images) images.push_back(std::move(image));
}

void add_assistant_turn(std::vector<tokenizer::ChatMessage>& messages, const Json& content, const std::string& name,
                        IgnoredFields& unknown) {
  tokenizer::ChatMessage turn{"assistant", "", std::nullopt, {}};
  if (content.is_string()) {
    turn.content = content.get<std::string>();
  } else if (content.is_array()) {
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string block_name = fmt::format("{}.content[{}]", name, i);
      const Json& block = content[i];
      if (!block.is_object()) refuse_field(block_name, "expected a content block object");
      const std::string type = read_string(block, "type", block_name + ".type").value_or("");
      if (type == "text") {
        check_known_fields(block, {"type", "text"}, {"cache_control", "citations"}, block_name + ".", unknown);
        turn.content += read_string(block, "text", block_name + ".text").value_or("");
      } else if (type == "thinking") {
        check_known_fields(block, {"type", "thinking"}, {"signature", "cache_control"}, block_name + ".", unknown);
        turn.reasoning_content =
            turn.reasoning_content.value_or("") + read_string(block, "thinking", block_name + ".thinking").value_or("");
      } else if (type == "redacted_thinking") {
        check_known_fields(block, {"type"}, {"data"}, block_name + ".", unknown);  // nothing readable to show
      } else if (type == "tool_use") {
        check_known_fields(block, {"type", "id", "name", "input"}, {"cache_control", "caller"}, block_name + ".",
                           unknown);
        auto tool = read_string(block, "name", block_name + ".name");
        if (!tool || tool->empty()) refuse_field(block_name + ".name", "missing");
        nlohmann::ordered_json input = block.value("input", Json::object());
        if (!input.is_object()) refuse_field(block_name + ".input", "expected an object");
        turn.tool_calls.push_back({*tool, std::move(input)});
      } else {
        refuse_field(block_name + ".type",
                     fmt::format("`{}` blocks are not supported in assistant turns; send text, thinking and tool_use "
                                 "blocks",
                                 type));
      }
    }
  } else {
    refuse_field(name + ".content", "expected a string or an array of content blocks");
  }
  messages.push_back(std::move(turn));
}

std::vector<tokenizer::ChatMessage> parse_turns(const Json& body, IgnoredFields& unknown,
                                                std::vector<ImagePart>& images) {
  std::vector<tokenizer::ChatMessage> messages;
  if (auto system = body.find("system"); system != body.end() && !system->is_null())
    messages.push_back({"system", text_of(*system, "system", unknown, true), std::nullopt, {}});
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) refuse_field("messages", "missing");
  if (!it->is_array() || it->empty()) refuse_field("messages", "expected a non-empty array of messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string name = fmt::format("messages[{}]", i);
    const Json& message = (*it)[i];
    if (!message.is_object()) refuse_field(name, "expected an object");
    check_known_fields(message, {"role", "content"}, {}, name + ".", unknown);
    auto role = read_string(message, "role", name + ".role");
    auto content = message.find("content");
    if (content == message.end() || content->is_null()) refuse_field(name + ".content", "missing");
    if (role == "user")
      add_user_turn(messages, *content, name, unknown, images);
    else if (role == "assistant")
      add_assistant_turn(messages, *content, name, unknown);
    else if (role == "system")  // Claude Code sends its environment as a system message after the first user turn
      messages.push_back({"system", text_of(*content, name + ".content", unknown), std::nullopt, {}});
    else
      refuse_field(name + ".role", "expected user, assistant or system");
  }
  return messages;
}

// Anthropic's custom tools ({type, name, description, input_schema}) in the Chat Completions shape the template takes.
Json parse_custom_tools(const Json& body, IgnoredFields& unknown) {
  Json tools = Json::array();
  const Json* it = read_tools(body);
  if (it == nullptr) return tools;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string name = fmt::format("tools[{}]", i);
    const Json& tool = (*it)[i];
    if (!tool.is_object()) refuse_field(name, "expected an object");
    if (auto type = read_string(tool, "type", name + ".type"); type && *type != "custom")
      refuse_field(name + ".type", fmt::format("`{}`: only custom tools (name, description, input_schema)", *type));
    check_known_fields(tool, {"type", "name", "description", "input_schema"}, {"cache_control", "strict"}, name + ".",
                       unknown);
    auto tool_name = read_string(tool, "name", name + ".name");
    if (!tool_name || tool_name->empty()) refuse_field(name + ".name", "missing");
    Json function = {{"name", *tool_name}};
    if (auto description = read_string(tool, "description", name + ".description"))
      function["description"] = *description;
    auto schema = tool.find("input_schema");
    if (schema == tool.end() || !schema->is_object())
      refuse_field(name + ".input_schema", "expected a JSON schema object");
    function["parameters"] = *schema;
    tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return tools;
}

ToolChoice parse_tool_choice(const Json& body, const Json& tools) {
  ToolChoice choice;
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return choice;
  if (!it->is_object()) refuse_field("tool_choice", "expected an object: {\"type\": \"auto\" | \"any\" | ...}");
  read_bool(*it, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use");
  const std::string type = read_string(*it, "type", "tool_choice.type").value_or("");
  if (type == "auto") return choice;
  if (type == "none")
    choice.mode = ToolChoice::Mode::none;
  else if (type == "any")
    choice.mode = ToolChoice::Mode::required;
  else if (type == "tool") {
    choice.mode = ToolChoice::Mode::function;
    choice.name = read_string(*it, "name", "tool_choice.name").value_or("");
    if (choice.name.empty()) refuse_field("tool_choice.name", "missing");
    if (choice.name.find_first_of("<>\n") != std::string::npos)
      refuse_field("tool_choice.name", "a tool name holding <, > or a line break cannot be forced");
    bool offered = false;
    for (const Json& tool : tools) offered |= tool["function"]["name"] == choice.name;
    if (!offered) refuse_field("tool_choice.name", fmt::format("`{}` is not one of the tools", choice.name));
  } else {
    refuse_field("tool_choice.type", fmt::format("`{}` is not one of auto, any, tool, none", type));
  }
  if (choice.forced() && tools.empty()) refuse_field("tool_choice", "forces a tool call, but no tools were given");
  return choice;
}

// thinking: {"type": "enabled", "budget_tokens": N} or {"type": "adaptive"} turn the template's reasoning on (the
// budget has no effect: max_tokens bounds the whole reply), {"type": "disabled"} off; absent: the server's default.
std::optional<bool> parse_thinking(const Json& body, IgnoredFields& unknown) {
  auto it = body.find("thinking");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) refuse_field("thinking", "expected an object");
  check_known_fields(*it, {"type", "budget_tokens"}, {"display"}, "thinking.", unknown);
  read_integer(*it, "budget_tokens", "thinking.budget_tokens", 0, std::numeric_limits<int32_t>::max());
  const std::string type = read_string(*it, "type", "thinking.type").value_or("");
  if (type == "enabled" || type == "adaptive") return true;
  if (type == "disabled") return false;
  refuse_field("thinking.type", fmt::format("`{}` is not one of enabled, adaptive, disabled", type));
}

// temperature, top_p, top_k, stop_sequences, max_tokens (and vLLM's ignore_eos), in the shape parse_sampling reads.
SamplingRequest parse_messages_sampling(const Json& body) {
  Json openai = Json::object();
  for (const char* key : {"temperature", "top_p", "top_k", "max_tokens", "ignore_eos"})
    if (auto it = body.find(key); it != body.end()) openai[key] = *it;
  if (auto stops = body.find("stop_sequences"); stops != body.end() && !stops->is_null()) {
    if (!stops->is_array()) refuse_field("stop_sequences", "expected an array of strings");
    for (size_t i = 0; i < stops->size(); ++i)
      if (!(*stops)[i].is_string()) refuse_field(fmt::format("stop_sequences[{}]", i), "expected a string");
    if (!stops->empty()) openai["stop"] = *stops;
  }
  return parse_sampling(openai);
}

}  // namespace

MessagesRequest parse_messages_request(const Json& body, const ServerOptions& options, bool count_only) {
  MessagesRequest request;
  if (count_only)
    check_known_fields(body, {"model", "messages", "system", "tools", "tool_choice", "thinking"},
                       {"mcp_servers", "context_management"}, "", request.ignored);
  else
    check_known_fields(body,
                       {"model", "messages", "system", "tools", "tool_choice", "thinking", "max_tokens", "temperature",
                        "top_p", "top_k", "stop_sequences", "stream", "metadata", "ignore_eos"},
                       {"service_tier", "container", "mcp_servers", "context_management"}, "", request.ignored);
  check_model(body, options.served_model_name);
  request.messages = parse_turns(body, request.ignored, request.images);
  join_leading_system_messages(request.messages);
  request.tools = parse_custom_tools(body, request.ignored);
  request.tool_choice = parse_tool_choice(body, request.tools);
  if (request.tool_choice.mode == ToolChoice::Mode::none) request.tools = Json::array();
  request.enable_thinking =
      thinking_with(request.tool_choice, parse_thinking(body, request.ignored), options.enable_thinking);
  if (count_only) return request;
  request.sampling = parse_messages_sampling(body);
  request.stream = read_bool(body, "stream", "stream").value_or(false);
  if (auto metadata = body.find("metadata"); metadata != body.end() && !metadata->is_null()) {
    if (!metadata->is_object()) refuse_field("metadata", "expected an object");
    check_known_fields(*metadata, {"user_id"}, {}, "metadata.", request.ignored);
    request.client.user = read_string(*metadata, "user_id", "metadata.user_id").value_or("");
  }
  return request;
}

}  // namespace duet::server
