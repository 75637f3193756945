// Leading system / developer messages, the same on chat and Responses (server/system_messages.h): the ones that open
// the conversation are joined in order with a blank line; one after another turn is refused, naming where it was.
#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/chat_request.h"
#include "server/responses_request.h"

namespace duet::server {
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

// A late system message is refused the same way on both routes (Responses used to move it to the top).
TEST(SystemMessages, ALateOneIsRefusedOnEveryRoute) {
  const ApiError on_chat = error_of([] {
    chat(R"({"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "Hi"},
      {"role": "system", "content": "b"}]})");
  });
  EXPECT_EQ(on_chat.status(), 400);
  EXPECT_EQ(on_chat.code(), "invalid_messages");
  EXPECT_EQ(on_chat.param(), "messages[2]");
  const ApiError on_responses = error_of([] {
    responses(R"({"instructions": "a", "input": [{"role": "user", "content": "Hi"},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
      {"role": "developer", "content": "b"}]})");
  });
  EXPECT_EQ(on_responses.code(), "invalid_messages");
  EXPECT_EQ(on_responses.param(), "input[2]");
}

}  // namespace
}  // namespace duet::server
