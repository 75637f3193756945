// POST /v1/chat/completions: render the chat template, generate, and answer as OpenAI does (a whole
// chat.completion, or chat.completion.chunk events), with reasoning and tool calls split out of the text.
#include "base/error.h"
#include "server/chat_prompt.h"
#include "server/chat_request.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/route_table.h"
#include "server/sse.h"
#include "server/structured_output.h"
#include "server/tool_call_parser.h"

namespace duet::server {
namespace {

struct ChatReply {
  std::string id = random_id("chatcmpl-");
  int64_t created = unix_now();
  std::string model;
  bool starts_in_reasoning = false;
  std::string answer_start;  // the forced start of a tool call (tool_choice required or a function)
  int32_t prompt_tokens = 0;
};

nlohmann::json logprob_entry(const ServerContext& context, const engine::TokenEvent& token) {
  std::string text = token_text(context.tokenizer, token.id);
  nlohmann::json entry = {
      {"token", text}, {"logprob", token.logprob.value_or(0.0f)}, {"bytes", token_bytes(context.tokenizer, token.id)}};
  auto top = nlohmann::json::array();
  for (const auto& candidate : token.top_logprobs) {
    std::string candidate_text = token_text(context.tokenizer, candidate.id);
    top.push_back({{"token", candidate_text},
                   {"logprob", candidate.logprob},
                   {"bytes", token_bytes(context.tokenizer, candidate.id)}});
  }
  entry["top_logprobs"] = std::move(top);
  return entry;
}

nlohmann::json tool_call_json(const ParsedToolCall& call, std::optional<size_t> index) {
  nlohmann::json json = {{"id", random_id("call_")},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", json_text(call.arguments)}}}};
  if (index) json["index"] = *index;
  return json;
}

class ChatStreamFormatter final : public StreamFormatter {
 public:
  ChatStreamFormatter(const ServerContext& context, ChatReply reply, const ChatRequest& request)
      : context_(context), reply_(std::move(reply)), request_(request) {
    for (int32_t i = 0; i < request_.sampling.n; ++i)
      choices_.push_back(
          {ChatOutputParser(reply_.starts_in_reasoning, !request_.tools.empty(), request_.tools, reply_.answer_start)});
  }

  std::string start() override {
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) out += chunk(i, {{"role", "assistant"}, {"content", ""}});
    return out;
  }

  std::string tokens(size_t choice, std::span<const engine::TokenEvent> tokens) override {
    std::string text;
    auto logprobs = nlohmann::json::array();
    auto ids = nlohmann::json::array();
    for (const auto& token : tokens) {
      text += token.text;
      ids.push_back(token.id);
      if (request_.logprobs) logprobs.push_back(logprob_entry(context_, token));
    }
    ChatOutputParser& parser = choices_[choice].parser;
    // Without logprobs or ids to carry, text the parser holds back sends nothing yet.
    if (!request_.logprobs && !request_.sampling.return_token_ids) return pieces(choice, parser.push(text), {}, {});
    return pieces(choice, parser.push(text), std::move(logprobs), std::move(ids));
  }

  std::string finish(size_t choice, const engine::FinishedEvent& finished) override {
    if (finished.reason == engine::FinishReason::error)
      return sse_event(error_json(500, "generation failed: " + finished.error, "", "engine_error"));
    ChatOutputParser& parser = choices_[choice].parser;
    std::string out = pieces(choice, parser.push(finished.text_tail), {}, {});
    out += pieces(choice, parser.finish(), {}, {});
    std::string reason = engine::to_string(finished.reason);
    if (choices_[choice].tool_calls > 0 && finished.reason == engine::FinishReason::stop) reason = "tool_calls";
    nlohmann::json last = base();
    last["choices"] = {
        {{"index", choice}, {"delta", nlohmann::json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}};
    return out + sse_event(last);
  }

  std::string end(const GenerationUsage& usage) override {
    return (request_.stream.include_usage ? usage_chunk(base(), usage) : std::string()) + sse_done();
  }

 private:
  struct Choice {
    ChatOutputParser parser;
    size_t tool_calls = 0;
  };

  nlohmann::json base() const {
    return chunk_header(reply_.id, "chat.completion.chunk", reply_.created, reply_.model,
                        request_.stream.include_usage);
  }

  std::string chunk(size_t index, nlohmann::json delta, nlohmann::json logprobs = nullptr,
                    nlohmann::json ids = nullptr) const {
    nlohmann::json choice = {
        {"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
    if (request_.sampling.return_token_ids && !ids.is_null()) choice["token_ids"] = std::move(ids);
    nlohmann::json json = base();
    json["choices"] = nlohmann::json::array({std::move(choice)});
    return sse_event(json);
  }

  // One chunk per parsed piece; the tokens' logprobs and ids ride on the first (or on an empty delta when
  // the parser is holding the text back).
  std::string pieces(size_t index, std::vector<OutputPiece> parsed, nlohmann::json logprobs, nlohmann::json ids) {
    std::string out;
    size_t& tool_calls = choices_[index].tool_calls;
    bool carried = logprobs.empty() && ids.empty();
    auto extras = [&](nlohmann::json& lp, nlohmann::json& id) {
      if (carried) return;
      if (request_.logprobs) lp = {{"content", std::move(logprobs)}};
      id = std::move(ids);
      carried = true;
    };
    for (auto& piece : parsed) {
      // parallel_tool_calls: false asks for one call per turn; the model may still write more, which are dropped.
      if (piece.kind == OutputPiece::Kind::tool_call && tool_calls > 0 && !request_.parallel_tool_calls) continue;
      nlohmann::json delta;
      if (piece.kind == OutputPiece::Kind::reasoning)
        delta = {{"reasoning_content", piece.text}};
      else if (piece.kind == OutputPiece::Kind::content)
        delta = {{"content", piece.text}};
      else
        delta = {{"tool_calls", {tool_call_json(piece.call, tool_calls++)}}};
      nlohmann::json lp = nullptr, id = nullptr;
      extras(lp, id);
      out += chunk(index, std::move(delta), std::move(lp), std::move(id));
    }
    if (!carried) {
      nlohmann::json lp = nullptr, id = nullptr;
      extras(lp, id);
      out += chunk(index, nlohmann::json::object(), std::move(lp), std::move(id));
    }
    return out;
  }

  const ServerContext& context_;
  ChatReply reply_;
  ChatRequest request_;
  std::vector<Choice> choices_;
};

// Choice `index` of a whole chat.completion.
nlohmann::json chat_choice_json(const ServerContext& context, const ChatReply& reply, const ChatRequest& request,
                                const CollectedGeneration& generation, size_t index) {
  ParsedChatOutput output = parse_chat_output(generation.text, reply.starts_in_reasoning, !request.tools.empty(),
                                              request.tools, reply.answer_start);
  if (!request.parallel_tool_calls && output.tool_calls.size() > 1) output.tool_calls.resize(1);
  nlohmann::json message = {{"role", "assistant"}};
  message["content"] =
      output.content.empty() && !output.tool_calls.empty() ? nlohmann::json(nullptr) : nlohmann::json(output.content);
  if (reply.starts_in_reasoning || !output.reasoning.empty()) message["reasoning_content"] = output.reasoning;
  if (!output.tool_calls.empty()) {
    message["tool_calls"] = nlohmann::json::array();
    for (const auto& call : output.tool_calls) message["tool_calls"].push_back(tool_call_json(call, std::nullopt));
  }
  std::string reason = engine::to_string(generation.finished.reason);
  if (!output.tool_calls.empty() && generation.finished.reason == engine::FinishReason::stop) reason = "tool_calls";

  nlohmann::json choice = {
      {"index", index}, {"message", std::move(message)}, {"logprobs", nullptr}, {"finish_reason", reason}};
  if (request.logprobs) {
    auto content = nlohmann::json::array();
    for (const auto& token : generation.tokens) content.push_back(logprob_entry(context, token));
    choice["logprobs"] = {{"content", std::move(content)}};
  }
  return choice;
}

nlohmann::json chat_completion_json(const ServerContext& context, const ChatReply& reply, const ChatRequest& request,
                                    std::span<const CollectedGeneration> generations) {
  auto choices = nlohmann::json::array();
  for (size_t i = 0; i < generations.size(); ++i)
    choices.push_back(chat_choice_json(context, reply, request, generations[i], i));
  return whole_answer_json({reply.id, "chat.completion", reply.created, reply.model}, std::move(choices),
                           request.sampling.return_token_ids, generations);
}

}  // namespace

void add_chat_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/chat/completions", [&context](const HttpRequest& req) {
    ChatRequest request = parse_chat_request(request_json(req), context.options);
    ChatPrompt prompt =
        build_chat_prompt(context, request.messages, request.tools, request.enable_thinking, request.sampling,
                          "messages", forced_answer_start(request.tool_choice), request.images);
    request.images = {};  // decoded into the prompt's images; the formatters copy the request
    apply_output_format(context, request.format, prompt.request, prompt.starts_in_reasoning);
    apply_tool_call_grammar(context, request.tools, request.tool_choice, request.parallel_tool_calls, request.format,
                            prompt.request, prompt.starts_in_reasoning);
    ChatReply reply;
    reply.model = context.options.served_model_name;
    reply.starts_in_reasoning = prompt.starts_in_reasoning;
    reply.answer_start = prompt.answer_start;
    reply.prompt_tokens = static_cast<int32_t>(prompt.request.prompt.size());

    Choices choices = submit_choices(context, prompt.request, request.sampling.n, "messages");
    return generation_response(
        context, std::move(choices), request.stream.stream,
        [&] { return std::make_unique<ChatStreamFormatter>(context, reply, request); },
        [&context, reply, request](std::span<const CollectedGeneration> generations) {
          return json_response(chat_completion_json(context, reply, request, generations));
        },
        request.client, report_ignored_fields(request.ignored, "/v1/chat/completions"));
  });
}

}  // namespace duet::server
