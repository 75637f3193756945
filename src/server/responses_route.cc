// POST /v1/responses: OpenAI's Responses API, stateless. The same prompt and generation as chat/completions; the
// reply comes back as output items (responses_output.h), whole or as the documented stream of named events.
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/route_table.h"

namespace duet::server {

void add_responses_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/responses", [&context](const HttpRequest& req) {
    ResponsesRequest request = parse_responses_request(request_json(req), context.options);
    ChatPrompt prompt = build_chat_prompt(context, request.messages, request.tools, request.enable_thinking,
                                          request.sampling, "input", forced_answer_start(request.tool_choice));
    apply_output_format(context, request.format, prompt.request, prompt.starts_in_reasoning);
    ResponseHeader header;
    header.model = context.options.served_model_name;
    header.starts_in_reasoning = prompt.starts_in_reasoning;
    header.answer_start = prompt.answer_start;
    Choices choices = {submit_request(context, std::move(prompt.request), "input")};
    return generation_response(
        context, std::move(choices), request.stream, [&] { return responses_stream_formatter(header, request); },
        [header, request](std::span<const CollectedGeneration> generations) {
          HttpResponse answer;
          answer.body = json_text(whole_response_json(header, request, generations.front()));
          return answer;
        },
        request.client, report_ignored_fields(request.ignored, "/v1/responses"));
  });
}

}  // namespace duet::server
