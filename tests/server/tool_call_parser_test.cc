#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include "base/json_depth.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::tool_call_parser_test {
namespace {

using Json = nlohmann::json;

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
  "detailed": {"type": "boolean"}, "zip": {"type": "string"}}}}}])");

TEST(ToolCallParser, ParsesXmlCallWithSchemaTypes) {
  auto call = parse_tool_call_block(
      "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=detailed>\ntrue\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n",
      kTools);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(Json(call->arguments), Json::parse(R"({"city": "Paris", "days": 3, "detailed": true, "zip": "75001"})"));
}

TEST(ToolCallParser, KeepsMultilineValuesAndUnknownParametersAsStrings) {
  auto call = parse_tool_call_block(
      "<function=f>\n<parameter=code>\nline 1\nline 2\n</parameter>\n"
      "<parameter=n>\n12\n</parameter>\n</function>",
      kTools);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->arguments["code"], "line 1\nline 2");
  EXPECT_EQ(call->arguments["n"], "12");  // no schema: the model's text as is
}

TEST(ToolCallParser, AcceptsJsonForm) {
  auto call = parse_tool_call_block(R"({"name": "get_weather", "arguments": {"city": "Oslo"}})", kTools);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(call->arguments["city"], "Oslo");
}

TEST(ToolCallParser, RefusesGarbage) {
  EXPECT_FALSE(parse_tool_call_block("hello", kTools));
  EXPECT_FALSE(parse_tool_call_block("<function=>\n</function>", kTools));
  EXPECT_FALSE(parse_tool_call_block("{\"arguments\": {}}", kTools));
  EXPECT_FALSE(parse_tool_call_block("<function=f", kTools));
}

// The JSON form's `arguments` may be a string holding JSON: that string is parsed too, so its nesting counts against
// the same limit as the block's own (brackets inside a string are invisible to the block's check).
std::string call_with_string_arguments(int depth) {
  const std::string inner = std::string(depth - 1, '[') + std::string(depth - 1, ']');
  const std::string arguments = "{\"x\": " + inner + "}";
  return Json{{"name", "get_weather"}, {"arguments", arguments}}.dump();
}

TEST(ToolCallParser, StringArgumentsWithinTheDepthLimitParse) {
  auto call = parse_tool_call_block(call_with_string_arguments(kMaxJsonDepth), kTools);
  ASSERT_TRUE(call);  // the control: exactly at the limit is a call
  EXPECT_TRUE(call->arguments["x"].is_array());
}

TEST(ToolCallParser, StringArgumentsDeeperThanTheLimitAreNotACall) {
  EXPECT_FALSE(parse_tool_call_block(call_with_string_arguments(kMaxJsonDepth + 1), kTools));
  // Deep enough to overflow the stack of any recursive walk over the parsed value (copy, dump, destroy).
  EXPECT_FALSE(parse_tool_call_block(call_with_string_arguments(60000), kTools));
}

TEST(ChatOutput, SplitsReasoningContentAndCalls) {
  auto output = parse_chat_output(
      "I should look it up.\n</think>\n\nLet me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Paris\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Rome\n</parameter>\n</function>\n</tool_call>",
      /*starts_in_reasoning=*/true, /*parse_tools=*/true, kTools);
  EXPECT_EQ(output.reasoning, "I should look it up.\n");
  EXPECT_EQ(output.content, "Let me check.");
  ASSERT_EQ(output.tool_calls.size(), 2u);
  EXPECT_EQ(output.tool_calls[1].arguments["city"], "Rome");
}

TEST(ChatOutput, WithoutToolsTagsStayText) {
  auto output = parse_chat_output("<tool_call>x</tool_call>", false, false, Json::array());
  EXPECT_EQ(output.content, "<tool_call>x</tool_call>");
  EXPECT_TRUE(output.tool_calls.empty());
}

TEST(ChatOutput, LeadingNewlinesOfPlainContentAreKept) {
  EXPECT_EQ(parse_chat_output("\n\nhi", false, true, kTools).content, "\n\nhi");
}

TEST(ChatOutput, UnterminatedReasoningIsAllReasoning) {
  auto output = parse_chat_output("thinking about it", true, false, Json::array());
  EXPECT_EQ(output.reasoning, "thinking about it");
  EXPECT_EQ(output.content, "");
}

TEST(ChatOutput, MalformedCallIsReturnedAsContent) {
  auto output = parse_chat_output("a<tool_call>not a call</tool_call>b", false, true, kTools);
  EXPECT_TRUE(output.tool_calls.empty());
  EXPECT_EQ(output.content, "a<tool_call>not a call</tool_call>b");
}

TEST(ChatOutput, UnclosedCallAtTheEndStillParses) {
  auto output = parse_chat_output(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "</function>",
      false, true, kTools);
  ASSERT_EQ(output.tool_calls.size(), 1u);
  EXPECT_EQ(output.tool_calls[0].arguments["city"], "Paris");
}

// Streaming cut anywhere (byte by byte here) gives the same pieces as the whole text.
TEST(ChatOutput, ByteByByteEqualsWhole) {
  std::string text =
      "plan</think>\n\nSure <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "</function>\n</tool_call> done <tool_c";
  auto whole = parse_chat_output(text, true, true, kTools);
  ChatOutputParser parser(true, true, kTools);
  ParsedChatOutput streamed;
  auto take = [&](std::vector<OutputPiece> pieces) {
    for (auto& piece : pieces) {
      if (piece.kind == OutputPiece::Kind::reasoning)
        streamed.reasoning += piece.text;
      else if (piece.kind == OutputPiece::Kind::content)
        streamed.content += piece.text;
      else
        streamed.tool_calls.push_back(piece.call);
    }
  };
  for (char c : text) take(parser.push(std::string(1, c)));
  take(parser.finish());
  EXPECT_EQ(streamed.reasoning, whole.reasoning);
  EXPECT_EQ(streamed.tool_calls.size(), whole.tool_calls.size());
  EXPECT_EQ(streamed.content, "Sure  done <tool_c");
}

TEST(ChatOutput, ModelOpenedThinkIsReasoning) {
  auto output = parse_chat_output("<think>\nhmm\n</think>\n\nanswer", false, false, Json::array());
  EXPECT_EQ(output.reasoning, "\nhmm\n");
  EXPECT_EQ(output.content, "answer");
}

}  // namespace
}  // namespace duet::server::tool_call_parser_test
