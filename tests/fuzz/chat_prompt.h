#pragma once
// The prompt a chat route renders from what its parser read (server/chat_prompt.cc, short of tokenizing it): the chat
// template over the messages with the tools and the thinking switch. The template's duet::Error is the route's 400
// invalid_messages, a refusal like the parser's.
#include <vector>

#include "base/error.h"
#include "tokenizer/chat_template.h"

namespace duet::fuzz {

inline void render_prompt(const std::vector<tokenizer::ChatMessage>& messages, const nlohmann::ordered_json& tools,
                          bool enable_thinking) {
  tokenizer::ChatOptions options;
  options.tools = tools;
  options.enable_thinking = enable_thinking;
  try {
    (void)tokenizer::render_chat(messages, options);
  } catch (const Error&) {
  }
}

}  // namespace duet::fuzz
