#pragma once
// A POST /v1/responses body (OpenAI's Responses API) read into a conversation for the chat template:
// `instructions` as the system message, `input` (a string, or message, function_call and function_call_output
// items, their content parts text or input_image) as the turns, function `tools` in the Chat Completions shape the
// template takes. previous_response_id and item references are resolved before (responses_state.h); conversation and
// background are refused by name.
#include <string>
#include <vector>

#include "server/image_parts.h"
#include "server/output_format.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_template.h"

namespace duet::server {

struct ResponsesRequest {
  std::vector<tokenizer::ChatMessage> messages;
  Json tools = Json::array();  // as the template takes them: {"type": "function", "function": {...}}
  ToolChoice tool_choice;      // required or a named function: forced_answer_start opens the answer
  bool enable_thinking = true;
  // reasoning.summary asked (auto, concise, detailed): the reasoning is sent as summary text, which the AI SDK and
  // LangChain read, instead of reasoning_text content.
  bool reasoning_summary = false;
  SamplingRequest sampling;
  bool stream = false;
  bool parallel_tool_calls = true;
  ClientTags client;
  IgnoredFields ignored;  // unknown fields the body carried (ignored_fields.h)
  // Echoed in the response object, as OpenAI does.
  Json echo = Json::object();  // instructions, tools, tool_choice, max_output_tokens, temperature, top_p, ...
  OutputFormat format;         // text.format (structured_output.h)
  // The input_image parts of every item, in the order the template renders them (their markup is in the messages'
  // content); decoded by the route as chat's image_url parts are (chat_prompt.h).
  std::vector<ImagePart> images;
};

ResponsesRequest parse_responses_request(const Json& body, const ServerOptions& options);

}  // namespace duet::server
