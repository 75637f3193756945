#pragma once
// A POST /v1/chat/completions body read into what the template and the engine take: messages, tools,
// thinking, sampling, streaming and logprobs, each field checked and refused by name.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/image_parts.h"
#include "server/output_format.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_template.h"

namespace duet::server {

struct ChatRequest {
  std::vector<tokenizer::ChatMessage> messages;
  Json tools = Json::array();  // empty when none were offered or tool_choice is "none"
  ToolChoice tool_choice;      // required or a named function: forced_answer_start opens the answer
  bool enable_thinking = true;
  SamplingRequest sampling;
  StreamRequest stream;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool parallel_tool_calls = true;  // false: only the reply's first tool call is returned
  ClientTags client;
  IgnoredFields ignored;  // unknown fields the body carried (ignored_fields.h)
  OutputFormat format;    // response_format (structured_output.h)
  // The image_url parts of every message, in the order the template renders them (their markup is in the messages'
  // content); decoded by the route, which refuses them when the server cannot read images.
  std::vector<ImagePart> images;
};

// messages[] (also used by POST /tokenize); unknown message and content-part fields go to `unknown`. With `images`,
// image_url parts are read into it (their markup rendered into the content); without, they are refused.
std::vector<tokenizer::ChatMessage> parse_chat_messages(const Json& body, IgnoredFields& unknown,
                                                        std::vector<ImagePart>* images = nullptr);
// tools[]: the tools to hand the template (tool_choice is read apart: tool_choice.h).
Json parse_tools(const Json& body);
// chat_template_kwargs: only enable_thinking is understood (the template reads nothing else); others go to `unknown`.
bool parse_enable_thinking(const Json& body, bool default_value, IgnoredFields& unknown);

ChatRequest parse_chat_request(const Json& body, const ServerOptions& options);

}  // namespace duet::server
