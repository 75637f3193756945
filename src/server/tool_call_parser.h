#pragma once
// Splits a Qwen3.5 chat reply into reasoning, content and tool calls, incrementally so that streaming and
// non-streaming answers come from the same code. The model writes
//   [reasoning]</think>\n\ncontent<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Text that might be the start of a tag is held back until the next push shows what it is.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace duet::server {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// Parses the text between <tool_call> and </tool_call>: the XML form above, or a JSON object
// {"name": ..., "arguments": {...}}. Parameter values become the JSON type the tool's schema declares for
// them (string when it declares none or the value does not parse). nullopt when it is neither form.
std::optional<ParsedToolCall> parse_tool_call_block(std::string_view block, const nlohmann::ordered_json& tools);

struct OutputPiece {
  enum class Kind { reasoning, content, tool_call };
  Kind kind = Kind::content;
  std::string text;  // reasoning or content
  ParsedToolCall call;
};

class ChatOutputParser {
 public:
  // starts_in_reasoning: the prompt ended inside an open <think> (the template's generation prompt with
  // thinking on). parse_tools: the request offered tools, so <tool_call> blocks are calls. forced: text the prompt
  // wrote at the start of the answer (tool_choice.h), read as if the model had written it.
  ChatOutputParser(bool starts_in_reasoning, bool parse_tools, nlohmann::ordered_json tools,
                   std::string_view forced = {});

  std::vector<OutputPiece> push(std::string_view text);
  // Releases what was held back; an unterminated tool call that still parses counts as a call.
  std::vector<OutputPiece> finish();

 private:
  enum class Mode { reasoning, content, tool_call };
  void drain(std::vector<OutputPiece>& out, bool final);
  void emit(std::vector<OutputPiece>& out, OutputPiece::Kind kind, std::string text);

  Mode mode_;
  bool parse_tools_;
  nlohmann::ordered_json tools_;
  bool at_content_start_ = true;  // where a model may open its own <think>
  bool after_tag_ = false;        // right after </think> or a tool call: blank lines there are layout
  std::string pending_;
};

// Collected form of a whole reply (non-streaming answers).
struct ParsedChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};
ParsedChatOutput parse_chat_output(std::string_view text, bool starts_in_reasoning, bool parse_tools,
                                   const nlohmann::ordered_json& tools, std::string_view forced = {});

}  // namespace duet::server
