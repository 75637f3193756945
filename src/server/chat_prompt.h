#pragma once
// From a conversation to an engine request, as both chat routes (chat/completions and responses) build it: the chat
// template rendered, tokenized, generation stopped at the end-of-turn tokens, the budget fitted to the context.
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "tokenizer/chat_template.h"

namespace duet::server {

struct ChatPrompt {
  engine::Request request;
  // The template's generation prompt opened <think> (thinking on): the reply starts inside the reasoning.
  bool starts_in_reasoning = false;
  // What the prompt wrote at the start of the answer (a forced tool call, tool_choice.h): the reply's parser reads it
  // first, as if the model had written it.
  std::string answer_start;
};

// `param` names the field a refusal points at (`messages`, `input`). `answer_start` follows the template's generation
// prompt. Throws ApiError 400 invalid_messages when the template cannot render the conversation,
// context_length_exceeded when the prompt fills the context.
ChatPrompt build_chat_prompt(const ServerContext& context, const std::vector<tokenizer::ChatMessage>& messages,
                             const Json& tools, bool enable_thinking, const SamplingRequest& sampling,
                             const std::string& param, const std::string& answer_start = {});

}  // namespace duet::server
