#pragma once
// Qwen3.5's chat format (ChatML with <think> and XML tool calls), rendered natively; checked byte for byte
// against a real Jinja engine running the template in tests.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace duet::tokenizer {

// Tool schemas and arguments keep the key order the client sent, because the template writes them back in
// that order (Python dicts do): parse request bodies with nlohmann::ordered_json, not nlohmann::json (which
// sorts keys). A nlohmann::json converts implicitly, but its keys are already sorted by then.
struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object (or null: no parameters); a JSON string is parsed first
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls;              // assistant only
};

struct ChatOptions {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // OpenAI tool objects, as the template gets them
  bool add_generation_prompt = true;
  bool enable_thinking = true;
};

// Renders exactly what tools/qwen35_chat_template.jinja renders under transformers (Jinja2) for the same
// input. Throws duet::Error naming the message index and field for input the format cannot express.
// One extension: a system message after the first (which the template refuses: "System message must be at the
// beginning") is rendered where it stands as a turn of its own, `<|im_start|>system\n` + its trimmed text +
// `<|im_end|>\n`, the form of the template's own system turn; what comes before it is rendered as without it.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace duet::tokenizer
