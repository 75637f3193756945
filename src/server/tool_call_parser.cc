#include "server/tool_call_parser.h"

#include <algorithm>

#include "base/json_depth.h"
#include "grammar/tool_call_grammar.h"

namespace duet::server {
namespace {

using Json = nlohmann::ordered_json;  // arguments keep the order the model wrote them in

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

std::string_view trim(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`: bytes that must wait for the
// next push before we know whether they start the tag.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t keep = std::min(text.size(), tag.size() - 1); keep > 0; --keep)
    if (tag.starts_with(text.substr(text.size() - keep))) return keep;
  return 0;
}

// The parameters schema of the tool named `function` (null when it has none).
const Json* parameters_of(const Json& tools, const std::string& function) {
  if (!tools.is_array()) return nullptr;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>() != function) continue;
    auto parameters = fn->find("parameters");
    return parameters == fn->end() ? nullptr : &*parameters;
  }
  return nullptr;
}

// The model writes every value as text; the schema says what the client expects back. A parameter whose schema
// admits a string is kept as the text (the rule the constrained grammar writes by: grammar/tool_call_grammar.h).
Json typed_value(const std::string& value, const Json* parameters, const std::string& name) {
  const bool wants_string = parameters == nullptr || grammar::parameter_written_as_text(*parameters, name);
  if (wants_string || !json_nesting_within(value)) return value;
  Json parsed = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return value;
  return parsed;
}

std::optional<ParsedToolCall> parse_json_call(std::string_view block) {
  if (!json_nesting_within(block)) return std::nullopt;
  Json parsed = Json::parse(block, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return std::nullopt;
  auto name = parsed.find("name");
  if (name == parsed.end() || !name->is_string()) return std::nullopt;
  ParsedToolCall call{name->get<std::string>(), Json::object()};
  if (auto arguments = parsed.find("arguments"); arguments != parsed.end()) {
    if (arguments->is_string()) {
      // The block's check cannot see inside this string: its own nesting is checked before it is parsed.
      const std::string& text = arguments->get_ref<const std::string&>();
      if (!json_nesting_within(text)) return std::nullopt;
      Json inner = Json::parse(text, nullptr, false);
      if (!inner.is_object()) return std::nullopt;
      call.arguments = inner;
    } else if (arguments->is_object()) {
      call.arguments = *arguments;
    } else {
      return std::nullopt;
    }
  }
  return call;
}

std::optional<ParsedToolCall> parse_xml_call(std::string_view block, const Json& tools) {
  if (!block.starts_with(kFunctionOpen)) return std::nullopt;
  size_t name_end = block.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  ParsedToolCall call;
  call.name = std::string(trim(block.substr(kFunctionOpen.size(), name_end - kFunctionOpen.size())));
  if (call.name.empty() || call.name.find_first_of("<\n") != std::string::npos) return std::nullopt;
  std::string_view body = block.substr(name_end + 1);
  if (size_t end = body.find(kFunctionClose); end != std::string_view::npos) body = body.substr(0, end);

  size_t at = body.find(kParameterOpen);
  while (at != std::string_view::npos) {
    size_t key_start = at + kParameterOpen.size();
    size_t key_end = body.find('>', key_start);
    if (key_end == std::string_view::npos) return std::nullopt;
    std::string key(trim(body.substr(key_start, key_end - key_start)));
    if (key.empty()) return std::nullopt;
    size_t value_start = key_end + 1;
    size_t value_end = body.find(kParameterClose, value_start);
    size_t next = body.find(kParameterOpen, value_start);
    // A parameter the model did not close ends where the next one starts.
    if (value_end == std::string_view::npos || (next != std::string_view::npos && next < value_end))
      value_end = next == std::string_view::npos ? body.size() : next;
    std::string_view value = body.substr(value_start, value_end - value_start);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    call.arguments[key] = typed_value(std::string(value), parameters_of(tools, call.name), key);
    at = next;
  }
  return call;
}

}  // namespace

std::optional<ParsedToolCall> parse_tool_call_block(std::string_view block, const nlohmann::ordered_json& tools) {
  block = trim(block);
  if (block.starts_with('{')) return parse_json_call(block);
  return parse_xml_call(block, tools);
}

ChatOutputParser::ChatOutputParser(bool starts_in_reasoning, bool parse_tools, nlohmann::ordered_json tools,
                                   std::string_view forced)
    : mode_(starts_in_reasoning ? Mode::reasoning : Mode::content),
      parse_tools_(parse_tools),
      tools_(std::move(tools)),
      pending_(forced) {}

std::vector<OutputPiece> ChatOutputParser::push(std::string_view text) {
  pending_.append(text);
  std::vector<OutputPiece> out;
  drain(out, false);
  return out;
}

std::vector<OutputPiece> ChatOutputParser::finish() {
  std::vector<OutputPiece> out;
  drain(out, true);
  return out;
}

void ChatOutputParser::emit(std::vector<OutputPiece>& out, OutputPiece::Kind kind, std::string text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != OutputPiece::Kind::tool_call) {
    out.back().text += text;
    return;
  }
  out.push_back(OutputPiece{kind, std::move(text), {}});
}

void ChatOutputParser::drain(std::vector<OutputPiece>& out, bool final) {
  while (true) {
    if (mode_ == Mode::reasoning) {
      size_t close = pending_.find(kThinkClose);
      if (close != std::string::npos) {
        emit(out, OutputPiece::Kind::reasoning, pending_.substr(0, close));
        pending_.erase(0, close + kThinkClose.size());
        mode_ = Mode::content;
        at_content_start_ = false;
        after_tag_ = true;
        continue;
      }
      size_t keep = final ? 0 : partial_tag_suffix(pending_, kThinkClose);
      emit(out, OutputPiece::Kind::reasoning, pending_.substr(0, pending_.size() - keep));
      pending_.erase(0, pending_.size() - keep);
      return;
    }

    if (mode_ == Mode::content) {
      if (after_tag_) {
        size_t blank = pending_.find_first_not_of('\n');
        pending_.erase(0, blank == std::string::npos ? pending_.size() : blank);
        if (pending_.empty()) return;
        after_tag_ = false;
      }
      if (at_content_start_) {
        if (pending_.empty()) return;
        if (pending_.starts_with(kThinkOpen)) {  // a model that opens its own reasoning
          pending_.erase(0, kThinkOpen.size());
          mode_ = Mode::reasoning;
          continue;
        }
        if (!final && kThinkOpen.starts_with(pending_)) return;
        at_content_start_ = false;
      }
      if (!parse_tools_) {
        emit(out, OutputPiece::Kind::content, std::move(pending_));
        pending_.clear();
        return;
      }
      size_t open = pending_.find(kToolCallOpen);
      if (open != std::string::npos) {
        emit(out, OutputPiece::Kind::content, pending_.substr(0, open));
        pending_.erase(0, open + kToolCallOpen.size());
        mode_ = Mode::tool_call;
        continue;
      }
      size_t keep = final ? 0 : partial_tag_suffix(pending_, kToolCallOpen);
      emit(out, OutputPiece::Kind::content, pending_.substr(0, pending_.size() - keep));
      pending_.erase(0, pending_.size() - keep);
      return;
    }

    // Mode::tool_call: wait for the whole block.
    size_t close = pending_.find(kToolCallClose);
    if (close == std::string::npos && !final) return;
    std::string block = pending_.substr(0, close);
    if (auto call = parse_tool_call_block(block, tools_)) {
      out.push_back(OutputPiece{OutputPiece::Kind::tool_call, {}, std::move(*call)});
    } else {
      // Not a call we understand: the client sees the text as the model wrote it.
      std::string raw = std::string(kToolCallOpen) + block;
      if (close != std::string::npos) raw += kToolCallClose;
      emit(out, OutputPiece::Kind::content, std::move(raw));
    }
    pending_.erase(0, close == std::string::npos ? pending_.size() : close + kToolCallClose.size());
    mode_ = Mode::content;
    after_tag_ = true;  // the newline between calls is layout, not content
    if (final && pending_.empty()) return;
  }
}

ParsedChatOutput parse_chat_output(std::string_view text, bool starts_in_reasoning, bool parse_tools,
                                   const nlohmann::ordered_json& tools, std::string_view forced) {
  ChatOutputParser parser(starts_in_reasoning, parse_tools, tools, forced);
  ParsedChatOutput result;
  auto take = [&](std::vector<OutputPiece> pieces) {
    for (auto& piece : pieces) {
      if (piece.kind == OutputPiece::Kind::reasoning)
        result.reasoning += piece.text;
      else if (piece.kind == OutputPiece::Kind::content)
        result.content += piece.text;
      else
        result.tool_calls.push_back(std::move(piece.call));
    }
  };
  take(parser.push(text));
  take(parser.finish());
  if (!result.tool_calls.empty()) result.content = std::string(trim(result.content));
  return result;
}

}  // namespace duet::server
