// The Responses API's output: the response object (whole, or as created / in progress) and the stream of named
// events for it. See responses_output.h.
#include "server/responses_output.h"

#include "server/errors.h"
#include "server/sse.h"
#include "server/tool_call_parser.h"

namespace duet::server {
namespace {

using OJson = nlohmann::ordered_json;

// A reasoning item's one part: reasoning_text content, or summary_text when the request asked for a summary.
OJson reasoning_part(bool summary, const std::string& text) {
  return {{"type", summary ? "summary_text" : "reasoning_text"}, {"text", text}};
}

// With `summary` the text is the item's summary and it has no content (as OpenAI's reasoning models send it);
// without, it is the content and the summary is empty. An item being streamed starts with neither part.
OJson reasoning_item(const std::string& id, bool summary, const std::string& text, const char* status) {
  OJson parts = OJson::array();
  if (!text.empty()) parts.push_back(reasoning_part(summary, text));
  OJson item = {{"type", "reasoning"}, {"id", id}, {"summary", summary ? parts : OJson::array()}};
  if (!summary) item["content"] = parts;
  item["status"] = status;
  return item;
}

OJson text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}, {"logprobs", OJson::array()}};
}

OJson message_item(const std::string& id, const std::string& text, const char* status) {
  OJson content = OJson::array();
  if (std::string_view(status) == "completed") content.push_back(text_part(text));
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

OJson function_call_item(const std::string& id, const ParsedToolCall& call, const std::string& arguments,
                         const char* status) {
  return {{"type", "function_call"}, {"id", id},        {"call_id", random_id("call_")}, {"name", call.name},
          {"arguments", arguments},  {"status", status}};
}

// The response object, as created (in progress, no output yet) or finished.
OJson response_json(const ResponseHeader& header, const ResponsesRequest& request, const char* status, OJson output,
                    const engine::FinishedEvent* finished) {
  OJson response = {{"id", header.id},       {"object", "response"},       {"created_at", header.created_at},
                    {"status", status},      {"error", nullptr},           {"incomplete_details", nullptr},
                    {"model", header.model}, {"output", std::move(output)}};
  for (auto it = request.echo.begin(); it != request.echo.end(); ++it) response[it.key()] = *it;
  if (!response.contains("tools")) response["tools"] = OJson::array();
  if (!response.contains("tool_choice")) response["tool_choice"] = "auto";
  if (!response.contains("parallel_tool_calls")) response["parallel_tool_calls"] = request.parallel_tool_calls;
  response["store"] = header.store;
  response["previous_response_id"] =
      header.previous_response_id.empty() ? OJson(nullptr) : OJson(header.previous_response_id);
  response["usage"] = nullptr;
  if (finished) {
    if (finished->reason == engine::FinishReason::length)
      response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (finished->reason == engine::FinishReason::cancelled) response["incomplete_details"] = {{"reason", "cancelled"}};
    response["usage"] = {{"input_tokens", finished->prompt_tokens},
                         {"input_tokens_details", {{"cached_tokens", finished->cached_tokens}}},
                         {"output_tokens", finished->completion_tokens},
                         {"output_tokens_details", {{"reasoning_tokens", 0}}},
                         {"total_tokens", finished->prompt_tokens + finished->completion_tokens}};
  }
  return response;
}

const char* final_status(const engine::FinishedEvent& finished) {
  return finished.reason == engine::FinishReason::stop ? "completed" : "incomplete";
}

// The stream: one open item at a time (reasoning or message); a tool call is an item of its own, sent whole.
class ResponsesStreamFormatter final : public StreamFormatter {
 public:
  ResponsesStreamFormatter(ResponseHeader header, ResponsesRequest request, ResponseDone on_done)
      : header_(std::move(header)),
        request_(std::move(request)),
        on_done_(std::move(on_done)),
        parser_(header_.starts_in_reasoning, !request_.tools.empty(), request_.tools, header_.answer_start) {}

  std::string start() override {
    OJson created = response_json(header_, request_, "in_progress", OJson::array(), nullptr);
    std::string out = event("response.created", {{"response", created}});  // in this order: sequence numbers
    return out + event("response.in_progress", {{"response", created}});
  }

  // One choice: the Responses API has no `n`.
  std::string tokens(size_t, std::span<const engine::TokenEvent> tokens) override {
    std::string text;
    for (const auto& token : tokens) text += token.text;
    return pieces(parser_.push(text));
  }

  std::string finish(size_t, const engine::FinishedEvent& finished) override {
    if (finished.reason == engine::FinishReason::error)
      return event("error", {{"code", "engine_error"}, {"message", "generation failed: " + finished.error}});
    std::string out = pieces(parser_.push(finished.text_tail));
    out += pieces(parser_.finish());
    if (output_.empty() && open_ == Open::none) out += open(Open::message);  // an empty reply: an empty message
    out += close_item();
    const char* status = final_status(finished);
    OJson response = response_json(header_, request_, status, output_, &finished);
    if (on_done_) on_done_(response);
    out += event(std::string("response.") + status, {{"response", std::move(response)}});
    return out;
  }

  std::string end(const GenerationUsage&) override { return {}; }  // the Responses API sends no [DONE]

 private:
  enum class Open { none, reasoning, message };

  std::string event(const std::string& type, OJson data) {
    OJson json = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto it = data.begin(); it != data.end(); ++it) json[it.key()] = *it;
    return sse_named_event(type, json);
  }

  OJson item_place() const { return {{"item_id", item_id_}, {"output_index", output_.size()}}; }

  // Where the open reasoning part is: summary_index 0, or content_index 0.
  OJson reasoning_place() const {
    OJson place = item_place();
    place[request_.reasoning_summary ? "summary_index" : "content_index"] = 0;
    return place;
  }

  std::string open(Open kind) {
    std::string out = close_item();
    open_ = kind;
    text_.clear();
    if (kind == Open::reasoning) {
      item_id_ = random_id("rs_");
      out += event("response.output_item.added",
                   {{"output_index", output_.size()},
                    {"item", reasoning_item(item_id_, request_.reasoning_summary, "", "in_progress")}});
      // Its one part, announced before any delta: clients (the openai client's stream helper) add the delta to it.
      OJson part = reasoning_place();
      part["part"] = reasoning_part(request_.reasoning_summary, "");
      out += event(request_.reasoning_summary ? "response.reasoning_summary_part.added" : "response.content_part.added",
                   part);
    } else {
      item_id_ = random_id("msg_");
      out += event("response.output_item.added",
                   {{"output_index", output_.size()}, {"item", message_item(item_id_, "", "in_progress")}});
      OJson part = item_place();
      part["content_index"] = 0;
      part["part"] = text_part("");
      out += event("response.content_part.added", part);
    }
    return out;
  }

  std::string close_item() {
    if (open_ == Open::none) return {};
    std::string out;
    OJson place = item_place();
    place["content_index"] = 0;
    OJson item;
    if (open_ == Open::reasoning) {
      const bool summary = request_.reasoning_summary;
      OJson done = reasoning_place();
      done["text"] = text_;
      out += event(summary ? "response.reasoning_summary_text.done" : "response.reasoning_text.done", done);
      OJson part = reasoning_place();
      part["part"] = reasoning_part(summary, text_);
      out += event(summary ? "response.reasoning_summary_part.done" : "response.content_part.done", part);
      item = reasoning_item(item_id_, summary, text_, "completed");
    } else {
      OJson done = place;
      done["text"] = text_;
      done["logprobs"] = OJson::array();
      out += event("response.output_text.done", done);
      OJson part = place;
      part["part"] = text_part(text_);
      out += event("response.content_part.done", part);
      item = message_item(item_id_, text_, "completed");
    }
    out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Open::none;
    return out;
  }

  std::string pieces(std::vector<OutputPiece> parsed) {
    std::string out;
    for (auto& piece : parsed) {
      if (piece.kind == OutputPiece::Kind::tool_call) {
        if (calls_ > 0 && !request_.parallel_tool_calls) continue;  // one call per turn was asked for
        ++calls_;
        out += close_item();
        const std::string id = random_id("fc_"), arguments = json_text(piece.call.arguments);
        OJson item = function_call_item(id, piece.call, arguments, "completed");
        OJson added = item;
        added["arguments"] = "";
        added["status"] = "in_progress";
        out += event("response.output_item.added", {{"output_index", output_.size()}, {"item", added}});
        out += event("response.function_call_arguments.delta",
                     {{"item_id", id}, {"output_index", output_.size()}, {"delta", arguments}});
        out += event(
            "response.function_call_arguments.done",
            {{"item_id", id}, {"output_index", output_.size()}, {"name", piece.call.name}, {"arguments", arguments}});
        out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(std::move(item));
        continue;
      }
      const Open kind = piece.kind == OutputPiece::Kind::reasoning ? Open::reasoning : Open::message;
      if (piece.text.empty()) continue;
      if (open_ != kind) out += open(kind);
      text_ += piece.text;
      if (kind == Open::reasoning) {
        OJson delta = reasoning_place();
        delta["delta"] = piece.text;
        out += event(
            request_.reasoning_summary ? "response.reasoning_summary_text.delta" : "response.reasoning_text.delta",
            delta);
        continue;
      }
      OJson delta = item_place();
      delta["content_index"] = 0;
      delta["delta"] = piece.text;
      delta["logprobs"] = OJson::array();
      out += event("response.output_text.delta", delta);
    }
    return out;
  }

  ResponseHeader header_;
  ResponsesRequest request_;
  ResponseDone on_done_;
  ChatOutputParser parser_;
  OJson output_ = OJson::array();  // the finished items
  Open open_ = Open::none;
  std::string item_id_, text_;  // the open item's
  size_t calls_ = 0;
  int64_t sequence_ = 0;
};

}  // namespace

OJson whole_response_json(const ResponseHeader& header, const ResponsesRequest& request,
                          const CollectedGeneration& generation) {
  ParsedChatOutput parsed = parse_chat_output(generation.text, header.starts_in_reasoning, !request.tools.empty(),
                                              request.tools, header.answer_start);
  if (!request.parallel_tool_calls && parsed.tool_calls.size() > 1) parsed.tool_calls.resize(1);
  OJson output = OJson::array();
  if (!parsed.reasoning.empty())
    output.push_back(reasoning_item(random_id("rs_"), request.reasoning_summary, parsed.reasoning, "completed"));
  // A message unless the reply is only reasoning or tool calls (an empty reply is an empty message).
  if (!parsed.content.empty() || (parsed.tool_calls.empty() && parsed.reasoning.empty()))
    output.push_back(message_item(random_id("msg_"), parsed.content, "completed"));
  for (const auto& call : parsed.tool_calls)
    output.push_back(function_call_item(random_id("fc_"), call, json_text(call.arguments), "completed"));
  const engine::FinishedEvent& finished = generation.finished;
  OJson response = response_json(header, request, final_status(finished), std::move(output), &finished);
  // The SDKs' convenience field, filled by the server here for clients that read it.
  std::string text;
  for (const auto& item : response["output"])
    if (item["type"] == "message")
      for (const auto& part : item["content"]) text += part["text"].get<std::string>();
  response["output_text"] = text;
  return response;
}

std::unique_ptr<StreamFormatter> responses_stream_formatter(ResponseHeader header, ResponsesRequest request,
                                                            ResponseDone on_done) {
  return std::make_unique<ResponsesStreamFormatter>(std::move(header), std::move(request), std::move(on_done));
}

}  // namespace duet::server
