// tool_choice "required" and named functions: read from chat and Responses bodies, refused by name when they cannot
// be honoured, the forced start of the answer, and the output parser reading that start as the reply's own.
#include "server/tool_choice.h"

#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/chat_request.h"
#include "server/responses_request.h"
#include "server/tool_call_parser.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::tool_choice_test {
namespace {

ServerOptions options(bool thinking) {
  ServerOptions o;
  o.served_model_name = "demo";
  o.enable_thinking = thinking;
  return o;
}

const std::string kChatTools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "noop"}}])";

ChatRequest chat(const std::string& extra, bool server_thinking = true) {
  return parse_chat_request(
      parse_json_body(R"({"messages": [{"role": "user", "content": "x"}], )" + kChatTools + ", " + extra + "}"),
      options(server_thinking));
}

ResponsesRequest responses(const std::string& extra) {
  return parse_responses_request(
      parse_json_body(R"({"input": "x", "tools": [{"type": "function", "name": "get_weather"}],
      )" + extra + "}"),
      options(true));
}

TEST(ToolChoice, ChatModesAndTheForcedStart) {
  EXPECT_EQ(chat(R"("tool_choice": "auto")").tool_choice.mode, ToolChoice::Mode::automatic);
  EXPECT_TRUE(chat(R"("tool_choice": "none")").tools.empty());
  const ChatRequest required = chat(R"("tool_choice": "required")");
  EXPECT_EQ(forced_answer_start(required.tool_choice), "<tool_call>\n");
  EXPECT_EQ(required.tools.size(), 2u) << "the tools stay in the prompt";
  const ChatRequest named = chat(R"("tool_choice": {"type": "function", "function": {"name": "noop"}})");
  EXPECT_EQ(forced_answer_start(named.tool_choice), "<tool_call>\n<function=noop>\n");
  EXPECT_EQ(forced_answer_start(chat("\"tool_choice\": null").tool_choice), "");
}

TEST(ToolChoice, ResponsesNamesTheFunctionFlat) {
  EXPECT_EQ(forced_answer_start(responses(R"("tool_choice": {"type": "function", "name": "get_weather"})").tool_choice),
            "<tool_call>\n<function=get_weather>\n");
  EXPECT_EQ(forced_answer_start(responses(R"("tool_choice": "required")").tool_choice), "<tool_call>\n");
  EXPECT_EQ(error_of([] {
              responses(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
            }).param(),
            "tool_choice.name");
}

TEST(ToolChoice, RefusedByName) {
  auto param = [](const std::string& extra) { return error_of([&] { chat(extra); }).param(); };
  EXPECT_EQ(param(R"("tool_choice": {"type": "function", "function": {"name": "missing"}})"), "tool_choice");
  EXPECT_EQ(param(R"("tool_choice": "any")"), "tool_choice");
  EXPECT_EQ(param(R"("tool_choice": 3)"), "tool_choice");
  EXPECT_EQ(param(R"("tool_choice": {"type": "custom", "function": {"name": "noop"}})"), "tool_choice.type");
  EXPECT_EQ(param(R"("tool_choice": {"type": "function"})"), "tool_choice.function");
  EXPECT_EQ(param(R"("tool_choice": {"type": "function", "function": {}})"), "tool_choice.function.name");
  EXPECT_EQ(error_of([] {
              parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}],
                  "tool_choice": "required"})"),
                                 options(true));
            }).param(),
            "tool_choice")
      << "nothing to call";
  EXPECT_EQ(error_of([] { responses(R"("tool_choice": {"type": "function", "name": "a>b"})"); }).param(),
            "tool_choice");
}

TEST(ToolChoice, AForcedCallRendersWithoutThinkingAndRefusesThinkingTheRequestAsked) {
  EXPECT_TRUE(chat(R"("tool_choice": "auto")").enable_thinking);  // control: the server's default
  EXPECT_FALSE(chat(R"("tool_choice": "required")").enable_thinking) << "the server's default yields";
  EXPECT_FALSE(chat(R"("tool_choice": "required", "reasoning_effort": "none")").enable_thinking);
  EXPECT_EQ(error_of([] { chat(R"("tool_choice": "required", "reasoning_effort": "high")"); }).param(), "tool_choice");
  EXPECT_EQ(error_of([] {
              chat(R"("tool_choice": {"type": "function", "function": {"name": "noop"}},
                   "chat_template_kwargs": {"enable_thinking": true})");
            }).param(),
            "tool_choice");
  EXPECT_EQ(error_of([] { responses(R"("tool_choice": "required", "reasoning": {"effort": "low"})"); }).param(),
            "tool_choice");
  EXPECT_FALSE(responses(R"("tool_choice": "required")").enable_thinking);
}

TEST(ToolChoice, TheParserReadsTheForcedStartAsTheReply) {
  const auto request = chat(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  const std::string forced = forced_answer_start(request.tool_choice);
  const std::string generated =
      "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
      "</tool_call>";
  ParsedChatOutput whole = parse_chat_output(generated, false, true, request.tools, forced);
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(whole.tool_calls[0].arguments, nlohmann::ordered_json::parse(R"({"city": "Oslo", "days": 3})"));
  EXPECT_EQ(whole.content, "");
  // Control: without the forced start the same text is no call.
  EXPECT_TRUE(parse_chat_output(generated, false, true, request.tools).tool_calls.empty());

  // Streamed a byte at a time: the same call, once, and no content.
  ChatOutputParser parser(false, true, request.tools, forced);
  std::vector<OutputPiece> pieces;
  for (char c : generated)
    for (auto& piece : parser.push(std::string_view(&c, 1))) pieces.push_back(std::move(piece));
  for (auto& piece : parser.finish()) pieces.push_back(std::move(piece));
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].kind, OutputPiece::Kind::tool_call);
  EXPECT_EQ(pieces[0].call.arguments, whole.tool_calls[0].arguments);

  // Cut short (max_tokens): the call that was begun is still a call.
  ParsedChatOutput cut = parse_chat_output("<parameter=city>\nOs", false, true, request.tools, forced);
  ASSERT_EQ(cut.tool_calls.size(), 1u);
  EXPECT_EQ(cut.tool_calls[0].arguments["city"], "Os");
}

}  // namespace
}  // namespace duet::server::tool_choice_test
