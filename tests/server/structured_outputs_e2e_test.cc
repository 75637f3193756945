// Structured outputs end to end: `duet serve` on the demo model, driven by the official clients
// (clients/structured_outputs.mjs: the openai client, the Vercel AI SDK), every object validated by ajv. Also the
// exactness contract: an unconstrained request's tokens are the same with or without constrained requests beside it.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

const std::string kKey = "sk-structured-test";

class StructuredOutputsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!demo_model_available()) return;
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--no-thinking", "--context", "1024", "--max-tokens", "512", "--api-key", kKey});
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> StructuredOutputsTest::server_;

TEST_F(StructuredOutputsTest, OfficialClientsGetValidObjects) {
  for (const char* package : {"openai", "ai", "ajv-formats"})
    if (!std::filesystem::exists(tests_dir() + "/node_modules/" + package))
      FAIL() << package << " is not installed: run scripts/test-deps.sh";
  const auto result = run_command("node " + tests_dir() + "/server/clients/structured_outputs.mjs " + server_->url() +
                                  " " + kKey + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("structured outputs: ok"), std::string::npos) << result.output;
}

// Strict tool calls through the openai client (clients/strict_tools.mjs), arguments validated by ajv, with its
// planted controls (no strict and no forced call: no valid call; a broken value: rejected).
TEST_F(StructuredOutputsTest, StrictToolCallsValidate) {
  for (const char* package : {"openai", "ajv-formats"})
    if (!std::filesystem::exists(std::string(DUET_TESTS_DIR) + "/node_modules/" + package))
      FAIL() << package << " is not installed: run scripts/test-deps.sh";
  const auto result =
      run_command("node " + tests_dir() + "/server/clients/strict_tools.mjs " + server_->url() + " " + kKey + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("strict tools: ok"), std::string::npos) << result.output;
}

// Row invariance: a plain request's completion ids are identical alone and beside constrained requests.
TEST_F(StructuredOutputsTest, UnconstrainedOutputDoesNotDependOnConstrainedNeighbours) {
  const httplib::Headers headers = {{"Authorization", "Bearer " + kKey}};
  const Json plain = {{"model", "demo"},         {"messages", {{{"role", "user"}, {"content", "Tell me something."}}}},
                      {"max_tokens", 48},        {"seed", 7},
                      {"temperature", 0.9},      {"ignore_eos", true},
                      {"return_token_ids", true}};
  const auto ids_of = [&](const Json& body) {
    auto c = server_->client();
    c.set_read_timeout(300);
    const auto res = c.Post("/v1/chat/completions", headers, body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    return res ? Json::parse(res->body)["choices"][0]["token_ids"] : Json();
  };
  const Json alone = ids_of(plain);
  ASSERT_EQ(alone.size(), 48u);
  Json constrained = plain;
  constrained.erase("ignore_eos");
  constrained["max_tokens"] = 200;
  constrained["response_format"] = Json::parse(R"({"type": "json_schema", "json_schema": {"name": "x", "schema":
      {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]}}})");
  std::vector<std::future<Json>> beside;
  for (int i = 0; i < 3; ++i) {
    Json body = constrained;
    body["seed"] = 100 + i;
    beside.push_back(std::async(std::launch::async, ids_of, body));
  }
  const Json together = ids_of(plain);
  for (auto& f : beside) f.get();
  EXPECT_EQ(together, alone);
  // Planted control: a different seed must change the ids, or the comparison above could not fail.
  Json other = plain;
  other["seed"] = 8;
  EXPECT_NE(ids_of(other), alone);
}

}  // namespace
}  // namespace duet::testing
