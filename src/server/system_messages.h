#pragma once
// Qwen3.5's chat template takes one system turn, and only as the first message. Clients send several: the AI SDK's
// `system` option beside a system message, LangChain's SystemMessages, Responses' `instructions` beside a developer
// item. Every route (chat, Responses, /tokenize) treats them alike: the system (and developer) messages that open
// the conversation are joined, in order, separated by a blank line, into one; a system message after a user,
// assistant or tool turn is refused (400 invalid_messages naming it), because moving it to the top would change
// what it means and the template has no other place for it.
#include <span>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace duet::server {

// `names[i]` is where messages[i] came from in the request (`messages[3]`, `input[2]`, `instructions`), for the
// refusal's param.
void join_leading_system_messages(std::vector<tokenizer::ChatMessage>& messages, std::span<const std::string> names);

}  // namespace duet::server
