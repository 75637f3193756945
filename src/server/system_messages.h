#pragma once
// Qwen3.5's chat template takes one system turn, and only as the first message. Clients send several: the AI SDK's
// `system` option beside a system message, LangChain's SystemMessages, Responses' `instructions` beside a developer
// item, Claude Code's environment after the first user turn. Every route (chat, Responses, Messages, /tokenize)
// treats them alike: the system (and developer) messages that open the conversation are joined, in order, separated
// by a blank line, into one; a system message after a user, assistant or tool turn stays where it is and is rendered
// there as a system turn of its own (tokenizer/chat_template.h), because moving it to the top would change what it
// means (the official template refuses it: this is duet's one extension of it).
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace duet::server {

void join_leading_system_messages(std::vector<tokenizer::ChatMessage>& messages);

}  // namespace duet::server
