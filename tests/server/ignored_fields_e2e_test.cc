// Unknown request fields over HTTP: ignored, named in X-Duet-Ignored-Fields on whole and streamed answers of chat,
// completions and responses, and in one warning log line per request; a known field of the wrong type is still 400.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

class IgnoredFieldsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (demo_model_available())
      server_ = std::make_unique<ServerProcess>(std::vector<std::string>{"--no-thinking", "--context", "512"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  }

  static httplib::Result post(const std::string& route, const Json& body) {
    return server_->client().Post(route, body.dump(), "application/json");
  }
  // The warning lines the server logged that name `needle`.
  static int warnings_naming(const std::string& needle) {
    std::ifstream in(server_->log_path());
    int count = 0;
    for (std::string line; std::getline(in, line);)
      if (line.find("unknown field") != std::string::npos && line.find(needle) != std::string::npos) ++count;
    return count;
  }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> IgnoredFieldsTest::server_;

const Json kChat = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 3}, {"temperature", 0}};

TEST_F(IgnoredFieldsTest, ChatNamesTopLevelMessageAndPartFieldsWholeAndStreamed) {
  Json body = kChat;
  body["x_whole"] = {{"any", 1}};
  body["messages"][0]["x_msg"] = true;
  body["messages"].push_back({{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", "hi"}, {"x_part", 1}}}}});
  body["messages"].push_back({{"role", "user"}, {"content", "again"}});
  auto whole = post("/v1/chat/completions", body);
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(whole->get_header_value("X-Duet-Ignored-Fields"),
            "x_whole, messages[0].x_msg, messages[1].content[0].x_part");
  // The answer is the one the same body without the unknown fields gets (greedy).
  Json plain = body;
  plain.erase("x_whole");
  plain["messages"][0].erase("x_msg");
  plain["messages"][1]["content"][0].erase("x_part");
  auto control = post("/v1/chat/completions", plain);
  ASSERT_TRUE(control);
  EXPECT_FALSE(control->has_header("X-Duet-Ignored-Fields"));
  EXPECT_EQ(Json::parse(whole->body)["choices"], Json::parse(control->body)["choices"]);
  EXPECT_EQ(warnings_naming("x_whole"), 1);

  body["stream"] = true;
  body["x_whole"] = nullptr;  // null is absent: not named
  body["x_stream"] = "s";
  auto streamed = post("/v1/chat/completions", body);
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(streamed->get_header_value("X-Duet-Ignored-Fields"),
            "x_stream, messages[0].x_msg, messages[1].content[0].x_part");
  EXPECT_TRUE(streamed->body.ends_with("data: [DONE]\n\n"));
  EXPECT_EQ(warnings_naming("x_stream"), 1);
  EXPECT_EQ(warnings_naming("x_whole"), 1) << "one line per request";
}

TEST_F(IgnoredFieldsTest, CompletionsAndResponsesWholeAndStreamed) {
  for (bool stream : {false, true}) {
    auto completion = post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}, {"x_c", 1}, {"stream", stream}});
    ASSERT_TRUE(completion);
    EXPECT_EQ(completion->status, 200) << completion->body;
    EXPECT_EQ(completion->get_header_value("X-Duet-Ignored-Fields"), "x_c");
    auto response = post("/v1/responses", {{"input", {{{"role", "user"}, {"content", "Hi"}, {"x_item", 1}}}},
                                           {"max_output_tokens", 2},
                                           {"x_r", 1},
                                           {"stream", stream}});
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200) << response->body;
    EXPECT_EQ(response->get_header_value("X-Duet-Ignored-Fields"), "x_r, input[0].x_item");
  }
  EXPECT_EQ(warnings_naming("x_c"), 2);
  EXPECT_EQ(warnings_naming("input[0].x_item"), 2);
}

TEST_F(IgnoredFieldsTest, WrongTypedKnownFieldsStay400AndNamesCannotForgeHeaders) {
  Json body = kChat;
  body["x_unknown"] = 1;
  body["max_tokens"] = "3";
  auto refused = post("/v1/chat/completions", body);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(Json::parse(refused->body)["error"]["param"], "max_tokens");
  EXPECT_FALSE(refused->has_header("X-Duet-Ignored-Fields"));
  auto responses = post("/v1/responses", {{"input", "Hi"}, {"x", 1}, {"max_output_tokens", 0}});
  ASSERT_TRUE(responses);
  EXPECT_EQ(Json::parse(responses->body)["error"]["param"], "max_output_tokens");

  body = kChat;
  body["evil\r\nSet-Cookie: a=b"] = 1;
  auto escaped = post("/v1/chat/completions", body);
  ASSERT_TRUE(escaped);
  EXPECT_EQ(escaped->status, 200);
  EXPECT_FALSE(escaped->has_header("Set-Cookie")) << "the line break did not reach the wire";
  // httplib percent-decodes header values: the name comes back whole (the escaping itself: request_parsing_test).
  EXPECT_EQ(escaped->get_header_value("X-Duet-Ignored-Fields"), "evil\r\nSet-Cookie: a=b");
}

}  // namespace
}  // namespace duet::testing
