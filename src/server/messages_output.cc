// Anthropic's Messages API output (whole and streamed). See messages_output.h.
#include "server/messages_output.h"

#include "server/errors.h"
#include "server/sse.h"
#include "server/tool_call_parser.h"

namespace duet::server {
namespace {

using OJson = nlohmann::ordered_json;

OJson tool_use_block(const ParsedToolCall& call) {
  return {{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", call.name}, {"input", call.arguments}};
}

// Anthropic's stop_reason, and the stop sequence that ended the reply (null otherwise).
std::pair<const char*, OJson> stop_of(const engine::FinishedEvent& finished, bool called_tools) {
  if (finished.reason == engine::FinishReason::length) return {"max_tokens", nullptr};
  if (finished.matched_stop_string) return {"stop_sequence", *finished.matched_stop_string};
  if (called_tools && finished.reason == engine::FinishReason::stop) return {"tool_use", nullptr};
  return {"end_turn", nullptr};  // the end of the turn, or cancelled (the server stopping, the client gone)
}

OJson message_usage(int32_t input_tokens, int32_t output_tokens) {
  return {{"input_tokens", input_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", 0},
          {"output_tokens", output_tokens}};
}

OJson message_json(const MessageHeader& header, OJson content, OJson stop_reason, OJson stop_sequence, OJson usage) {
  return {{"id", header.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", header.model},
          {"content", std::move(content)},
          {"stop_reason", std::move(stop_reason)},
          {"stop_sequence", std::move(stop_sequence)},
          {"usage", std::move(usage)}};
}

std::string event(const std::string& type, OJson data) {
  OJson json = {{"type", type}};
  for (auto it = data.begin(); it != data.end(); ++it) json[it.key()] = *it;
  return "event: " + type + "\ndata: " + json_text(json) + "\n\n";
}

// One open block at a time (thinking or text); a tool call is a block of its own, sent whole.
class MessagesStreamFormatter final : public StreamFormatter {
 public:
  MessagesStreamFormatter(MessageHeader header, MessagesRequest request)
      : header_(std::move(header)),
        request_(std::move(request)),
        parser_(header_.starts_in_reasoning, !request_.tools.empty(), request_.tools, header_.answer_start) {}

  std::string start() override {
    return event(
        "message_start",
        {{"message", message_json(header_, OJson::array(), nullptr, nullptr, message_usage(header_.input_tokens, 0))}});
  }

  std::string tokens(size_t, std::span<const engine::TokenEvent> tokens) override {
    std::string text;
    for (const auto& token : tokens) text += token.text;
    return pieces(parser_.push(text));
  }

  std::string finish(size_t, const engine::FinishedEvent& finished) override {
    if (finished.reason == engine::FinishReason::error)
      return event("error", {{"error", {{"type", "api_error"}, {"message", "generation failed: " + finished.error}}}});
    std::string out = pieces(parser_.push(finished.text_tail));
    out += pieces(parser_.finish());
    out += close_block();
    auto [reason, sequence] = stop_of(finished, calls_ > 0);
    out += event("message_delta", {{"delta", {{"stop_reason", reason}, {"stop_sequence", sequence}}},
                                   {"usage", {{"output_tokens", finished.completion_tokens}}}});
    return out + event("message_stop", OJson::object());
  }

  std::string end(const GenerationUsage&) override { return {}; }

 private:
  enum class Open { none, thinking, text };

  std::string open(Open kind) {
    std::string out = close_block();
    open_ = kind;
    OJson block = kind == Open::thinking ? OJson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                         : OJson{{"type", "text"}, {"text", ""}};
    return out + event("content_block_start", {{"index", index_}, {"content_block", block}});
  }

  std::string close_block() {
    if (open_ == Open::none) return {};
    open_ = Open::none;
    return event("content_block_stop", {{"index", index_++}});
  }

  std::string pieces(std::vector<OutputPiece> parsed) {
    std::string out;
    for (auto& piece : parsed) {
      if (piece.kind == OutputPiece::Kind::tool_call) {
        ++calls_;
        out += close_block();
        OJson block = tool_use_block(piece.call);
        const std::string input = json_text(block["input"]);
        block["input"] = OJson::object();  // filled by the deltas, as Anthropic streams a call
        out += event("content_block_start", {{"index", index_}, {"content_block", block}});
        out += event("content_block_delta",
                     {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
        out += event("content_block_stop", {{"index", index_++}});
        continue;
      }
      if (piece.text.empty()) continue;
      const bool thinking = piece.kind == OutputPiece::Kind::reasoning;
      const Open kind = thinking ? Open::thinking : Open::text;
      if (open_ != kind) out += open(kind);
      OJson delta = thinking ? OJson{{"type", "thinking_delta"}, {"thinking", piece.text}}
                             : OJson{{"type", "text_delta"}, {"text", piece.text}};
      out += event("content_block_delta", {{"index", index_}, {"delta", delta}});
    }
    return out;
  }

  MessageHeader header_;
  MessagesRequest request_;
  ChatOutputParser parser_;
  Open open_ = Open::none;
  size_t index_ = 0;  // the open (or next) block's index
  size_t calls_ = 0;
};

}  // namespace

OJson whole_message_json(const MessageHeader& header, const MessagesRequest& request,
                         const CollectedGeneration& generation) {
  ParsedChatOutput parsed = parse_chat_output(generation.text, header.starts_in_reasoning, !request.tools.empty(),
                                              request.tools, header.answer_start);
  OJson content = OJson::array();
  if (!parsed.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", parsed.reasoning}, {"signature", ""}});
  if (!parsed.content.empty()) content.push_back({{"type", "text"}, {"text", parsed.content}});
  for (const auto& call : parsed.tool_calls) content.push_back(tool_use_block(call));
  const auto& finished = generation.finished;
  auto [reason, sequence] = stop_of(finished, !parsed.tool_calls.empty());
  return message_json(header, std::move(content), reason, sequence,
                      message_usage(finished.prompt_tokens, finished.completion_tokens));
}

std::unique_ptr<StreamFormatter> messages_stream_formatter(MessageHeader header, MessagesRequest request) {
  return std::make_unique<MessagesStreamFormatter>(std::move(header), std::move(request));
}

OJson anthropic_error_json(int status, const std::string& message) {
  const char* type = "invalid_request_error";
  switch (status) {
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      if (status >= 500) type = "api_error";
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace duet::server
