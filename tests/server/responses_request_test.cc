// POST /v1/responses bodies read into the conversation the template gets: instructions and input items in order,
// flat function tools in the template's shape (the client's key order kept), reasoning effort as the thinking
// switch, and everything that would need stored state refused by name.
#include "server/responses_request.h"

#include <gtest/gtest.h>

#include "api_error_of.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::responses_request_test {
namespace {

ResponsesRequest parse(const std::string& body) {
  ServerOptions options;
  options.served_model_name = "demo";
  return parse_responses_request(parse_json_body(body), options);
}

std::string param_of(const std::string& body) {
  return error_of([&] { parse(body); }).param();
}

TEST(ResponsesRequest, InputItemsBecomeTurns) {
  const auto request = parse(R"({"instructions": "Be brief.", "input": [
    {"role": "developer", "content": "Use metric units."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                     {"type": "input_text", "text": "in Oslo?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"z\": 1, \"a\": 2}"},
    {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "4 C"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "4 C at noon."}]},
    {"role": "user", "content": "Thanks"}]})");
  const auto& m = request.messages;
  ASSERT_EQ(m.size(), 7u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "Be brief.\n\nUse metric units.");
  EXPECT_EQ(m[1].content, "Weather in Oslo?");
  EXPECT_EQ(m[2].role, "assistant");  // both calls in one assistant turn
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].arguments.dump(), R"({"z":1,"a":2})");  // parsed here, in the client's order
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[4].content, "noon");
  EXPECT_EQ(m[5].content, "4 C at noon.");
  EXPECT_EQ(m[6].content, "Thanks");
}

TEST(ResponsesRequest, FlatToolsTakeTheTemplatesShapeInTheClientsOrder) {
  const auto request = parse(R"({"input": "x", "tools": [{"type": "function", "parameters": {"type": "object",
    "properties": {"b": {}, "a": {}}}, "name": "f", "description": "d", "strict": true}]})");
  ASSERT_EQ(request.tools.size(), 1u);
  EXPECT_EQ(request.tools[0].dump(),
            R"({"type":"function","function":{"parameters":{"type":"object","properties":{"b":{},"a":{}}},)"
            R"("name":"f","description":"d"}})");
  EXPECT_TRUE(
      parse(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "none"})").tools.empty());
}

TEST(ResponsesRequest, ReasoningEffortIsTheThinkingSwitch) {
  EXPECT_FALSE(parse(R"({"input": "x", "reasoning": {"effort": "none"}})").enable_thinking);
  EXPECT_TRUE(parse(R"({"input": "x", "reasoning": {"effort": "low", "summary": "auto"}})").enable_thinking);
  EXPECT_TRUE(parse(R"({"input": "x", "reasoning": null})").enable_thinking);
  EXPECT_EQ(param_of(R"({"input": "x", "reasoning": {"effort": "max"}})"), "reasoning.effort");
}

TEST(ResponsesRequest, BudgetAndSampling) {
  const auto request = parse(R"({"input": "x", "max_output_tokens": 7, "temperature": 0, "top_p": 0.5})");
  EXPECT_EQ(request.sampling.max_tokens, 7);
  EXPECT_EQ(request.sampling.params.temperature, 0.0f);
  EXPECT_EQ(request.sampling.params.top_p, 0.5f);
  EXPECT_EQ(request.echo["max_output_tokens"], 7);
}

TEST(ResponsesRequest, UnknownFieldsAreIgnoredAndNamed) {
  const auto request = parse(R"({"frobnicate": 1, "input": [{"role": "user", "x_item": 2,
      "content": [{"type": "input_text", "text": "hi", "x_part": 3}]}], "reasoning": {"effort": "low", "x_r": 1},
      "tools": [{"type": "function", "name": "f", "x_tool": 1}]})");
  EXPECT_EQ(request.ignored.paths(),
            (std::vector<std::string>{"frobnicate", "input[0].x_item", "input[0].content[0].x_part", "tools[0].x_tool",
                                      "reasoning.x_r"}));
  EXPECT_EQ(request.messages.back().content, "hi");
  EXPECT_TRUE(parse(R"({"input": "x", "metadata": {}, "store": false})").ignored.empty());  // control
  EXPECT_EQ(param_of(R"({"input": "x", "frobnicate": 1, "temperature": "hot"})"), "temperature");
}

TEST(ResponsesRequest, StateAndUnsupportedFeaturesAreRefusedByName) {
  EXPECT_EQ(param_of(R"({"input": "x", "previous_response_id": "resp_1"})"), "previous_response_id");
  EXPECT_EQ(param_of(R"({"input": "x", "conversation": "conv_1"})"), "conversation");
  EXPECT_EQ(param_of(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(param_of(R"({"input": [{"type": "item_reference", "id": "msg_1"}]})"), "input[0].type");
  EXPECT_EQ(param_of(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(param_of(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text.format.schema");
  EXPECT_EQ(param_of(R"({"input": "x", "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(param_of(R"({"model": "demo"})"), "input");
  // Was (issue 24, 6): arguments nested too deep were refused naming the chat message they became.
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "name": "f",
                "arguments": "{\"a\": )" +
                     deep + R"(}"}]})"),
            "input[1].arguments");
  EXPECT_EQ(param_of(R"({"input": [{"type": "function_call", "name": "f", "arguments": "[1]"}]})"),
            "input[0].arguments");
  // Nulls and store: false are absent.
  EXPECT_EQ(parse(R"({"input": "x", "store": false, "previous_response_id": null, "metadata": null})").messages.size(),
            1u);
}

}  // namespace
}  // namespace duet::server::responses_request_test
