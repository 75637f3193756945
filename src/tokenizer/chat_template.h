#pragma once
// Qwen3.5's chat format (ChatML with <think> and XML tool calls), rendered natively; checked byte for byte
// against a real Jinja engine running the template in tests.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace duet::tokenizer {

struct ToolCall {
  std::string name;
  nlohmann::json arguments;  // an object; a JSON string is parsed first
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls;              // assistant only
};

struct ChatOptions {
  nlohmann::json tools = nlohmann::json::array();  // OpenAI tool objects, passed to the template
  bool add_generation_prompt = true;
  bool enable_thinking = true;
};

// Throws duet::Error naming the message index and field for input the format cannot express.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace duet::tokenizer
