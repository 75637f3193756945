// The Responses API's event stream for scripted replies (the tiny demo model never calls a tool): the
// documented order of events for reasoning, text and function calls, sequence numbers, and a final response that
// holds the same items the events built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../run_command.h"
#include "../tests_dir.h"
#include "server/responses_output.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::responses_stream_test {
namespace {

using Json = nlohmann::json;

const char* kTools = R"({"input": "x", "tools": [{"type": "function", "name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}]})";

// The SSE text of a stream: the formatter fed `pieces` of text as tokens, then finished with `reason`.
std::string stream_sse(const std::string& body, bool starts_in_reasoning, const std::vector<std::string>& pieces,
                       engine::FinishReason reason = engine::FinishReason::stop) {
  ServerOptions options;
  options.served_model_name = "demo";
  ResponseHeader header;
  header.model = "demo";
  header.starts_in_reasoning = starts_in_reasoning;
  auto formatter = responses_stream_formatter(header, parse_responses_request(parse_json_body(body), options));
  std::string sse = formatter->start();
  for (const auto& text : pieces) {
    engine::TokenEvent token;
    token.text = text;
    sse += formatter->tokens(0, std::span<const engine::TokenEvent>(&token, 1));
  }
  engine::FinishedEvent finished;
  finished.reason = reason;
  finished.prompt_tokens = 10;
  finished.completion_tokens = static_cast<int32_t>(pieces.size());
  sse += formatter->finish(0, finished);
  sse += formatter->end({});
  return sse;
}

// Every event of that stream, parsed.
std::vector<Json> stream_events(const std::string& body, bool starts_in_reasoning,
                                const std::vector<std::string>& pieces,
                                engine::FinishReason reason = engine::FinishReason::stop) {
  const std::string sse = stream_sse(body, starts_in_reasoning, pieces, reason);
  std::vector<Json> events;
  std::istringstream lines(sse);
  std::string line, name;
  while (std::getline(lines, line)) {
    if (line.starts_with("event: ")) name = line.substr(7);
    if (!line.starts_with("data: ")) continue;
    Json event = Json::parse(line.substr(6));
    EXPECT_EQ(event["type"], name) << "the event line names the data's type";
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<std::string> types(const std::vector<Json>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e["type"]);
  return out;
}

// The order of OpenAI's Responses streaming reference: every part is announced (content_part.added) before its
// deltas and closed (content_part.done) before its item; the openai client's stream helper needs the announcement.
TEST(ResponsesStream, ReasoningThenTextInTheDocumentedOrder) {
  const auto events = stream_events(R"({"input": "x"})", true, {"Let me ", "think.", "</think>\n\n", "Hello", "!"});
  EXPECT_EQ(types(events),
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                "response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done",
                "response.content_part.done", "response.output_item.done", "response.output_item.added",
                "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                "response.output_text.done", "response.content_part.done", "response.output_item.done",
                "response.completed"}));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);
  EXPECT_EQ(events[3]["part"]["type"], "reasoning_text");
  EXPECT_EQ(events[3]["content_index"], 0);
  EXPECT_EQ(events[6]["text"], "Let me think.");
  EXPECT_EQ(events[7]["part"]["text"], "Let me think.");
  EXPECT_EQ(events[13]["text"], "Hello!");
  EXPECT_EQ(events[9]["output_index"], 1);
  const Json& response = events.back()["response"];
  EXPECT_EQ(response["status"], "completed");
  ASSERT_EQ(response["output"].size(), 2u);
  EXPECT_EQ(response["output"][0], events[8]["item"]);
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "Let me think.");
  EXPECT_EQ(response["output"][1], events[15]["item"]);
  EXPECT_EQ(response["output"][1]["content"][0]["text"], "Hello!");
  EXPECT_EQ(response["usage"]["output_tokens"], 5);
}

// reasoning.summary asked: the reasoning goes out as summary text (the events the AI SDK and LangChain read).
TEST(ResponsesStream, ASummaryIsAskedTheReasoningIsItsSummary) {
  const auto events = stream_events(R"({"input": "x", "reasoning": {"effort": "high", "summary": "auto"}})", true,
                                    {"Let me ", "think.", "</think>\n\n", "Hi"});
  const auto t = types(events);
  const std::vector<std::string> head(t.begin() + 2, t.begin() + 9);
  EXPECT_EQ(head,
            (std::vector<std::string>{"response.output_item.added", "response.reasoning_summary_part.added",
                                      "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
                                      "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                                      "response.output_item.done"}));
  EXPECT_EQ(events[3]["summary_index"], 0);
  EXPECT_EQ(events[3]["part"]["type"], "summary_text");
  const Json& item = events[8]["item"];
  ASSERT_EQ(item["summary"].size(), 1u);
  EXPECT_EQ(item["summary"][0]["text"], "Let me think.");
  EXPECT_FALSE(item.contains("content"));
  EXPECT_EQ(events.back()["response"]["output"][0], item);
}

TEST(ResponsesStream, AFunctionCallIsAnItemWithItsArguments) {
  const auto events = stream_events(kTools, false,
                                    {"Checking.", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n",
                                     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"});
  const auto t = types(events);
  const std::vector<std::string> tail(t.end() - 5, t.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"response.output_item.added", "response.function_call_arguments.delta",
                                            "response.function_call_arguments.done", "response.output_item.done",
                                            "response.completed"}));
  const Json& call = events[events.size() - 2]["item"];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], R"({"city":"Oslo","days":3})");  // typed by the schema, in the order written
  EXPECT_TRUE(call["call_id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(events[events.size() - 4]["delta"], call["arguments"]);
  const Json& response = events.back()["response"];
  ASSERT_EQ(response["output"].size(), 2u);
  EXPECT_EQ(response["output"][0]["type"], "message");
  EXPECT_EQ(response["output"][1], call);
}

TEST(ResponsesStream, ABudgetThatRunsOutIsIncomplete) {
  const auto events = stream_events(R"({"input": "x"})", false, {"Hel"}, engine::FinishReason::length);
  const Json& last = events.back();
  EXPECT_EQ(last["type"], "response.incomplete");
  EXPECT_EQ(last["response"]["status"], "incomplete");
  EXPECT_EQ(last["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ResponsesStream, AnEmptyReplyIsAnEmptyMessage) {
  const auto events = stream_events(R"({"input": "x"})", false, {});
  const Json& output = events.back()["response"]["output"];
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["type"], "message");
  EXPECT_EQ(output[0]["content"][0]["text"], "");
}

// The official clients' stream readers (openai's responses.stream(), the AI SDK's streamText, LangChain's stream) fed
// the scripted stream: each gets the reasoning and the text (tests/server/clients/replay_responses_stream.mjs).
TEST(ResponsesStream, OfficialClientsReadReasoningAndText) {
  const std::string tests = ::duet::testing::tests_dir();
  for (const char* package : {"openai", "ai", "@langchain/openai"})
    if (!std::filesystem::exists(tests + "/node_modules/" + package))
      FAIL() << package << " is not installed: run scripts/test-deps.sh";
  for (bool summary : {false, true}) {
    const std::string body =
        summary ? R"({"input": "x", "reasoning": {"effort": "high", "summary": "detailed"}})" : R"({"input": "x"})";
    const auto file = std::filesystem::temp_directory_path() /
                      ("duet-responses-replay-" + std::to_string(getpid()) + (summary ? "-summary" : "") + ".sse");
    std::ofstream(file) << stream_sse(body, true, {"Let me ", "think.", "</think>\n\n", "Hello", "!"});
    auto result = testing::run_command("node " + tests + "/server/clients/replay_responses_stream.mjs " +
                                       file.string() + (summary ? " 1" : " 0") + " 'Let me think.' 'Hello!' 2>&1");
    std::filesystem::remove(file);
    EXPECT_EQ(result.status, 0) << (summary ? "summary: " : "content: ") << result.output;
    EXPECT_NE(result.output.find("replay responses stream: ok"), std::string::npos) << result.output;
  }
}

}  // namespace
}  // namespace duet::server::responses_stream_test
