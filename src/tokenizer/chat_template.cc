// Qwen3.5's chat template, rendered natively. Each step mirrors a line of tools/qwen35_chat_template.jinja
// as Jinja2 runs it under transformers: `|trim` is Python's str.strip(), `tojson` is json.dumps with
// ensure_ascii=False, `|string` is Python's str(). The tests render the same conversations with Jinja and
// compare bytes.
#include "tokenizer/chat_template.h"

#include "base/error.h"
#include "base/json_depth.h"
#include "tokenizer/python_json.h"
#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

constexpr std::string_view kToolsHeader = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsFooter =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and "
    "do not tell the user about function calls\n</IMPORTANT>";

// Python's str.isspace(): what str.strip() removes.
bool py_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view trim(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t j = b;
    if (!py_space(utf8_next(s, j))) break;
    b = j;
  }
  size_t e = s.size();
  while (e > b) {
    size_t i = e - 1;
    while (i > b && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
    size_t j = i;
    if (!py_space(utf8_next(s, j))) break;
    e = i;
  }
  return s.substr(b, e - b);
}

std::string_view strip_newlines_left(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view strip_newlines_right(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// s.split(sep)[-1]: what follows the last `sep`, or all of `s`.
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

// s.split(sep)[0]
std::string_view before_first(std::string_view s, std::string_view sep) { return s.substr(0, s.find(sep)); }

bool is_tool_response(std::string_view s) {
  return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

nlohmann::ordered_json arguments_of(const ToolCall& call, size_t index, size_t k) {
  const nlohmann::ordered_json& a = call.arguments;
  if (a.is_object() || a.is_null()) return a;
  if (a.is_string()) {  // OpenAI clients send arguments as a JSON string
    if (!json_nesting_within(a.get_ref<const std::string&>()))
      fail("messages[{}].tool_calls[{}].function.arguments: nests deeper than {} levels", index, k, kMaxJsonDepth);
    nlohmann::ordered_json parsed;
    try {
      parsed = nlohmann::ordered_json::parse(a.get_ref<const std::string&>());
    } catch (const nlohmann::json::exception&) {
      fail("messages[{}].tool_calls[{}].function.arguments: not valid JSON", index, k);
    }
    if (!parsed.is_object()) fail("messages[{}].tool_calls[{}].function.arguments: must be a JSON object", index, k);
    return parsed;
  }
  fail("messages[{}].tool_calls[{}].function.arguments: must be a JSON object", index, k);
}

void render_tool_calls(std::string& out, const ChatMessage& m, std::string_view content, size_t index) {
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    const ToolCall& call = m.tool_calls[k];
    if (call.name.empty()) fail("messages[{}].tool_calls[{}].function.name: empty", index, k);
    if (k == 0)
      out += trim(content).empty() ? "<tool_call>\n<function=" : "\n\n<tool_call>\n<function=";
    else
      out += "\n<tool_call>\n<function=";
    out += call.name;
    out += ">\n";
    const nlohmann::ordered_json args = arguments_of(call, index, k);
    if (args.is_object()) {
      for (auto it = args.begin(); it != args.end(); ++it) {
        out += "<parameter=";
        out += it.key();
        out += ">\n";
        // Mappings and lists as JSON, everything else (strings, numbers, booleans) as Python's str().
        if (it->is_object() || it->is_array())
          python_json_append(out, *it);
        else
          out += python_str(*it);
        out += "\n</parameter>\n";
      }
    }
    out += "</function>\n</tool_call>";
  }
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  if (messages.empty()) fail("messages: at least one message is needed");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      fail("messages[{}].role: {:?} is not one of system, user, assistant, tool", i, m.role);
    }
    if (m.role != "assistant" && m.reasoning_content)
      fail("messages[{}].reasoning_content: only assistant messages have reasoning", i);
    if (m.role != "assistant" && !m.tool_calls.empty())
      fail("messages[{}].tool_calls: only assistant messages call tools", i);
    if (utf8_invalid_at(m.content) != m.content.size()) fail("messages[{}].content: not valid UTF-8", i);
  }
  const nlohmann::ordered_json& tools = options.tools;
  if (!tools.is_null() && !tools.is_array()) fail("tools: must be a list");

  std::string out;
  const bool has_system = messages[0].role == "system";
  if (tools.is_array() && !tools.empty()) {
    out += "<|im_start|>system\n";
    out += kToolsHeader;
    for (const auto& tool : tools) {
      out += '\n';
      python_json_append(out, tool);
    }
    out += kToolsFooter;
    if (has_system) {
      const std::string_view system = trim(messages[0].content);
      if (!system.empty()) {
        out += "\n\n";
        out += system;
      }
    }
    out += "<|im_end|>\n";
  } else if (has_system) {
    out += "<|im_start|>system\n";
    out += trim(messages[0].content);
    out += "<|im_end|>\n";
  }

  // The last real user query: earlier assistant turns drop their reasoning. Tool results sent as user
  // messages (<tool_response>...</tool_response>) do not count as a query.
  std::optional<size_t> last_query;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user" && !is_tool_response(trim(messages[i].content))) {
      last_query = i;
      break;
    }
  }
  if (!last_query) fail("messages: no user message (one that is not a tool response) to answer");

  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string_view content = trim(m.content);
    if (m.role == "system" && i > 0) {  // duet's extension: a late system message keeps its place (chat_template.h)
      out += "<|im_start|>system\n";
      out += content;
      out += "<|im_end|>\n";
    } else if (m.role == "user") {
      out += "<|im_start|>user\n";
      out += content;
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (content.find("</think>") != std::string_view::npos) {
        // Reasoning left inline in the content: split it out as the template does.
        reasoning = strip_newlines_left(after_last(strip_newlines_right(before_first(content, "</think>")), "<think>"));
        content = strip_newlines_left(after_last(content, "</think>"));
      }
      reasoning = trim(reasoning);
      out += "<|im_start|>assistant\n";
      if (i > *last_query) {
        out += "<think>\n";
        out += reasoning;
        out += "\n</think>\n\n";
      }
      out += content;
      render_tool_calls(out, m, content, i);
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i > 0 && messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += content;
      out += "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out +=
        options.enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace duet::tokenizer
