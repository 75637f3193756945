// POST /v1/responses: OpenAI's Responses API. The same prompt and generation as chat/completions; the reply comes
// back as output items (responses_output.h), whole or as the documented stream of named events. Stored state
// (previous_response_id, item references) is resolved first and the finished response kept when `store` asks
// (responses_state.h, response_store.h), under the request's key.
#include "server/api_keys.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/responses_state.h"
#include "server/route_table.h"
#include "server/structured_output.h"

namespace duet::server {

void add_responses_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/responses", [&context](const HttpRequest& req) {
    const std::string owner = key_owner(req.header("Authorization"));
    ResponsesState state;
    const Json body = resolve_responses_state(request_json(req), context.responses, owner, state);
    ResponsesRequest request = parse_responses_request(body, context.options);
    ChatPrompt prompt =
        build_chat_prompt(context, request.messages, request.tools, request.enable_thinking, request.sampling, "input",
                          forced_answer_start(request.tool_choice), request.images);
    request.images = {};  // decoded into the prompt's images; the formatters copy the request
    apply_output_format(context, request.format, prompt.request, prompt.starts_in_reasoning);
    // Responses tools reach the template without their `strict` (responses_request.cc): a forced call is held to the
    // schemas, leniently.
    apply_tool_call_grammar(context, request.tools, request.tool_choice, request.parallel_tool_calls, request.format,
                            prompt.request, prompt.starts_in_reasoning);
    ResponseHeader header;
    header.model = context.options.served_model_name;
    header.starts_in_reasoning = prompt.starts_in_reasoning;
    header.answer_start = prompt.answer_start;
    header.store = state.store;
    header.previous_response_id = state.previous_response_id;
    ResponseDone keep;
    if (state.store)
      keep = [&context, owner, items = std::move(state.items)](const nlohmann::ordered_json& response) {
        context.responses.put(owner, StoredResponse{response, items});
      };
    Choices choices = {submit_request(context, std::move(prompt.request), "input")};
    return generation_response(
        context, std::move(choices), request.stream, [&] { return responses_stream_formatter(header, request, keep); },
        [header, request, keep](std::span<const CollectedGeneration> generations) {
          HttpResponse answer;
          auto response = whole_response_json(header, request, generations.front());
          if (keep) keep(response);
          answer.body = json_text(response);
          return answer;
        },
        request.client, report_ignored_fields(request.ignored, "/v1/responses"));
  });
}

}  // namespace duet::server
