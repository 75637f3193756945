#pragma once
// A POST /v1/messages body (Anthropic's Messages API) read into the conversation the chat template takes: `system`
// as the system message; user turns' text blocks as user text and their tool_result blocks as tool turns; assistant
// turns' text, thinking (as reasoning) and tool_use blocks (as tool calls); tools {name, description, input_schema}
// in the Chat Completions shape; tool_choice auto / any / tool / none; thinking enabled / disabled as the template's
// switch; stop_sequences as stop strings. Image blocks (base64 sources) in user turns and tool results are read as
// chat's image_url parts are (image_parts.h); documents are refused by name.
#include <optional>
#include <string>
#include <vector>

#include "server/ignored_fields.h"
#include "server/image_parts.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_template.h"

namespace duet::server {

struct MessagesRequest {
  std::vector<tokenizer::ChatMessage> messages;
  Json tools = Json::array();  // {"type": "function", "function": {name, description, parameters}}
  ToolChoice tool_choice;
  bool enable_thinking = true;
  SamplingRequest sampling;
  bool stream = false;
  ClientTags client;  // metadata.user_id as `user`
  IgnoredFields ignored;
  // The image blocks of every turn, in the order the template renders them (their markup is in the messages'
  // content); decoded by the route as chat's image_url parts are (chat_prompt.h).
  std::vector<ImagePart> images;
};

// `count_only`: the body of /v1/messages/count_tokens (no max_tokens, no sampling fields).
MessagesRequest parse_messages_request(const Json& body, const ServerOptions& options, bool count_only = false);

}  // namespace duet::server
