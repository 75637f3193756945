#pragma once
// The Responses API's output for one generation: output items (reasoning, message, function_call) in a `response`
// object, whole, or as the documented stream of named events: response.created, response.in_progress, then per
// item response.output_item.added, its part announced (response.content_part.added, or
// response.reasoning_summary_part.added for reasoning sent as a summary), its deltas (reasoning_text,
// reasoning_summary_text, output_text, function_call_arguments) and their .done events, the part's .done,
// response.output_item.done, and last response.completed (or response.incomplete when the budget ran out).
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/generation.h"
#include "server/responses_request.h"

namespace duet::server {

struct ResponseHeader {
  std::string id = random_id("resp_");
  int64_t created_at = unix_now();
  std::string model;
  bool starts_in_reasoning = false;  // the prompt opened <think>: the reply starts inside the reasoning
  std::string answer_start;          // the forced start of a tool call (tool_choice required or a function)
  bool store = false;                // echoed: whether the response is kept (response_store.h)
  std::string previous_response_id;  // echoed; empty: null
};

// Called with the finished response object (completed or incomplete), to keep it when `store` asked for it.
using ResponseDone = std::function<void(const nlohmann::ordered_json& response)>;

// The finished response, with `output_text` (the messages' text, as the SDKs compute it).
nlohmann::ordered_json whole_response_json(const ResponseHeader& header, const ResponsesRequest& request,
                                           const CollectedGeneration& generation);

// The stream of events for one choice (the Responses API has no `n`); it sends no `[DONE]`.
std::unique_ptr<StreamFormatter> responses_stream_formatter(ResponseHeader header, ResponsesRequest request,
                                                            ResponseDone on_done = {});

}  // namespace duet::server
