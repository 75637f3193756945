// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the same prompt and generation as
// chat/completions, so agents and SDKs written for Anthropic's API work too. Refusals come in Anthropic's error
// shape (messages_output.h); those of the HTTP layer (401, 413, ...) keep OpenAI's, with the same status.
#include "base/error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/messages_output.h"
#include "server/messages_request.h"
#include "server/route_table.h"
#include "server/structured_output.h"

namespace duet::server {
namespace {

// What `make` answers, its ApiError and duet::Error refusals written in Anthropic's shape.
HttpResponse anthropic_errors(const std::function<HttpResponse()>& make) {
  auto refusal = [](int status, const std::string& message, std::optional<int> retry_after_s) {
    HttpResponse res;
    res.status = status;
    res.body = json_text(anthropic_error_json(status, message));
    if (retry_after_s) res.headers.emplace_back("Retry-After", std::to_string(*retry_after_s));
    return res;
  };
  try {
    return make();
  } catch (const ApiError& error) {
    return refusal(error.status(), error.what(), error.retry_after_s);
  } catch (const duet::Error& error) {
    return refusal(400, error.what(), std::nullopt);
  }
}

}  // namespace

void add_messages_routes(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/messages", [&context](const HttpRequest& req) {
    return anthropic_errors([&] {
      MessagesRequest request = parse_messages_request(request_json(req), context.options);
      ChatPrompt prompt =
          build_chat_prompt(context, request.messages, request.tools, request.enable_thinking, request.sampling,
                            "messages", forced_answer_start(request.tool_choice), request.images);
      request.images = {};  // decoded into the prompt's images; the formatters copy the request
      // A forced call (tool_choice any or tool) is held to the tools' input schemas.
      apply_tool_call_grammar(context, request.tools, request.tool_choice, /*parallel=*/true, OutputFormat{},
                              prompt.request, prompt.starts_in_reasoning);
      MessageHeader header;
      header.model = context.options.served_model_name;
      header.starts_in_reasoning = prompt.starts_in_reasoning;
      header.answer_start = prompt.answer_start;
      header.input_tokens = static_cast<int32_t>(prompt.request.prompt.size());
      Choices choices = {submit_request(context, std::move(prompt.request), "messages")};
      return generation_response(
          context, std::move(choices), request.stream, [&] { return messages_stream_formatter(header, request); },
          [header, request](std::span<const CollectedGeneration> generations) {
            HttpResponse answer;
            answer.body = json_text(whole_message_json(header, request, generations.front()));
            return answer;
          },
          request.client, report_ignored_fields(request.ignored, "/v1/messages"));
    });
  });

  // The prompt's tokens exactly as POST /v1/messages would build it (template, tools, thinking, a forced call's start,
  // each image's tokens: its image is decoded and resized for that, and refused as the message would be).
  table.add(RouteTable::Method::post, "/v1/messages/count_tokens", [&context](const HttpRequest& req) {
    return anthropic_errors([&] {
      MessagesRequest request = parse_messages_request(request_json(req), context.options, /*count_only=*/true);
      tokenizer::ChatOptions options;
      options.tools = request.tools;
      options.enable_thinking = request.enable_thinking;
      const std::string prompt =
          context.render_chat(request.messages, options) + forced_answer_start(request.tool_choice);
      std::vector<int32_t> ids = context.tokenizer.encode(prompt);
      prompt_images(context, request.images, ids, "messages");
      HttpResponse answer;
      answer.body = json_text(nlohmann::ordered_json{{"input_tokens", ids.size()}});
      for (auto& header : report_ignored_fields(request.ignored, "/v1/messages/count_tokens"))
        answer.headers.push_back(std::move(header));
      return answer;
    });
  });
}

}  // namespace duet::server
