#pragma once
// Anthropic's Messages API output for one generation: a `message` with content blocks (thinking, text, tool_use),
// stop_reason (end_turn, max_tokens, stop_sequence, tool_use) and usage, whole or as Anthropic's stream of named
// events: message_start, per block content_block_start / content_block_delta (thinking_delta, text_delta,
// input_json_delta) / content_block_stop, then message_delta (stop_reason, output usage) and message_stop.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/generation.h"
#include "server/messages_request.h"

namespace duet::server {

struct MessageHeader {
  std::string id = random_id("msg_");
  std::string model;
  bool starts_in_reasoning = false;
  std::string answer_start;  // a forced tool call's start (tool_choice any / tool)
  int32_t input_tokens = 0;  // known before generation: message_start reports it
};

nlohmann::ordered_json whole_message_json(const MessageHeader& header, const MessagesRequest& request,
                                          const CollectedGeneration& generation);

std::unique_ptr<StreamFormatter> messages_stream_formatter(MessageHeader header, MessagesRequest request);

// An error in Anthropic's shape: {"type": "error", "error": {"type": ..., "message": ...}}.
nlohmann::ordered_json anthropic_error_json(int status, const std::string& message);

}  // namespace duet::server
