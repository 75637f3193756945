// System / developer messages, the same on chat, Responses and Messages (server/system_messages.h): the ones that
// open the conversation are joined in order with a blank line; one after another turn keeps its place.
#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/chat_request.h"
#include "server/messages_request.h"
#include "server/responses_request.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::system_messages_test {
namespace {

ServerOptions options() {
  ServerOptions options;
  options.served_model_name = "demo";
  return options;
}

ChatRequest chat(const std::string& body) { return parse_chat_request(parse_json_body(body), options()); }
ResponsesRequest responses(const std::string& body) {
  return parse_responses_request(parse_json_body(body), options());
}

// The AI SDK's `system` option beside a system message; LangChain's two SystemMessages.
TEST(SystemMessages, LeadingOnesAreJoinedOnChat) {
  const auto request = chat(R"({"messages": [{"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
    {"role": "user", "content": "Hi"}]})");
  ASSERT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[0].content, "Be brief.\n\nUse metric units.");
  EXPECT_EQ(request.messages[1].role, "user");
}

TEST(SystemMessages, LeadingOnesAreJoinedOnResponsesAfterInstructions) {
  const auto request = responses(R"({"instructions": "Be brief.", "input": [
    {"role": "system", "content": "Use metric units."}, {"role": "developer", "content": "No emoji."},
    {"role": "user", "content": "Hi"}]})");
  ASSERT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0].content, "Be brief.\n\nUse metric units.\n\nNo emoji.");
}

// A late system message keeps its place, the same on every route (it used to be refused; Claude Code sends its
// environment that way, after the first user turn). The renderer gives it a system turn there (chat_template_test).
TEST(SystemMessages, ALateOneKeepsItsPlaceOnEveryRoute) {
  const auto on_chat = chat(R"({"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "Hi"},
      {"role": "system", "content": "b"}]})");
  ASSERT_EQ(on_chat.messages.size(), 3u);
  EXPECT_EQ(on_chat.messages[0].content, "a");
  EXPECT_EQ(on_chat.messages[2].role, "system");
  EXPECT_EQ(on_chat.messages[2].content, "b");
  const auto on_responses = responses(R"({"instructions": "a", "input": [{"role": "user", "content": "Hi"},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
      {"role": "developer", "content": "b"}]})");
  ASSERT_EQ(on_responses.messages.size(), 4u);
  EXPECT_EQ(on_responses.messages[3].role, "system");
  EXPECT_EQ(on_responses.messages[3].content, "b");
  const auto on_messages = parse_messages_request(
      parse_json_body(R"({"system": "a", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"},
      {"role": "system", "content": [{"type": "text", "text": "b"}]}]})"),
      options());
  ASSERT_EQ(on_messages.messages.size(), 3u);
  EXPECT_EQ(on_messages.messages[2].role, "system");
  EXPECT_EQ(on_messages.messages[2].content, "b");
}

// Claude Code's first system block, a billing header whose hash changes with every request, is left out of the
// prompt: two requests that differ only there render the same system text (so the prompt cache resumes one from the
// other). A block that only mentions it, later, and the same text in a message stay.
TEST(SystemMessages, ClaudeCodesBillingHeaderIsLeftOut) {
  const auto system_of = [](const std::string& cch) {
    return parse_messages_request(parse_json_body(R"({"max_tokens": 8, "system": [{"type": "text", "text":
        "x-anthropic-billing-header: cc_version=2.1.328.a1b; cc_entrypoint=cli; cch=)" +
                                                  cch + R"(;"}, {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Rules. x-anthropic-billing-header: stays here", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "x-anthropic-billing-header: a user's text"}]})"),
                                  options())
        .messages;
  };
  const auto first = system_of("36ee5"), second = system_of("0aaa9");
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].content, "You are Claude Code.Rules. x-anthropic-billing-header: stays here");
  EXPECT_EQ(second[0].content, first[0].content);
  EXPECT_EQ(first[1].content, "x-anthropic-billing-header: a user's text");
}

}  // namespace
}  // namespace duet::server::system_messages_test
