// Official clients against `duet serve` on the demo model, as real users run them: the `openai` npm client with
// every documented field (a value, then null) and the Responses API, the Vercel AI SDK and LangChain, each over chat
// completions and over the Responses API (text, streaming, tools, aborts);
// a browser's CORS preflight; and a coding agent's request (max_tokens 8000, a long prompt, many tools).
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

const std::string kKey = "sk-clients-test";
const std::string kOtherKey = "sk-clients-other";  // stored responses are one key's own
const std::string kOrigin = "http://localhost:5173";

class ClientsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!demo_model_available()) return;
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--no-thinking", "--context", "512", "--max-tokens", "64", "--api-key", kKey,
                                 "--api-key", kOtherKey, "--cors-origin", kOrigin});
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  }

  // Runs tests/server/clients/SCRIPT against the server; it must exit 0 and print its `ok` line.
  static void run_client(const std::string& script, const std::string& ok_line, const std::string& package,
                         const std::string& extra_args = "") {
    if (!std::filesystem::exists(tests_dir() + "/node_modules/" + package))
      FAIL() << package << " is not installed: run scripts/test-deps.sh";
    auto result = run_command("node " + tests_dir() + "/server/clients/" + script + " " + server_->url() + " " + kKey +
                              " " + extra_args + " 2>&1");
    EXPECT_EQ(result.status, 0) << result.output;
    EXPECT_NE(result.output.find(ok_line), std::string::npos) << result.output;
  }

  static httplib::Headers with_key(httplib::Headers headers = {}) {
    headers.emplace("Authorization", "Bearer " + kKey);
    return headers;
  }

  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> ClientsTest::server_;

TEST_F(ClientsTest, OpenAiClientSendsEveryFieldWithValuesAndNulls) {
  run_client("openai_fields.mjs", "openai fields: ok", "openai");
}

TEST_F(ClientsTest, VercelAiSdkChat) { run_client("ai_sdk_chat.mjs", "ai sdk chat: ok", "@ai-sdk/openai"); }

TEST_F(ClientsTest, LangChainChatOpenAi) {
  run_client("langchain_chat.mjs", "langchain chat: ok", "@langchain/openai");
}

TEST_F(ClientsTest, OpenAiClientResponsesApi) { run_client("openai_responses.mjs", "openai responses: ok", "openai"); }

TEST_F(ClientsTest, VercelAiSdkDefaultResponsesProvider) {
  run_client("ai_sdk_responses.mjs", "ai sdk responses: ok", "@ai-sdk/openai");
}

TEST_F(ClientsTest, OpenAiClientStoredResponsesPerKey) {
  run_client("openai_stored_responses.mjs", "openai stored responses: ok", "openai", kOtherKey);
}

TEST_F(ClientsTest, VercelAiSdkDefaultProviderSecondTurn) {
  run_client("ai_sdk_stored_responses.mjs", "ai sdk stored responses: ok", "@ai-sdk/openai");
}

TEST_F(ClientsTest, AnthropicClientMessagesApi) {
  run_client("anthropic_messages.mjs", "anthropic messages: ok", "@anthropic-ai/sdk");
}

TEST_F(ClientsTest, LangChainUseResponsesApi) {
  run_client("langchain_responses.mjs", "langchain responses: ok", "@langchain/openai");
}

// What a browser sends before a cross-origin POST with a key: no Authorization on the preflight itself.
TEST_F(ClientsTest, BrowserPreflightIsAnsweredWithoutAKeyAndLeaksNoRoutes) {
  auto client = server_->client();
  const httplib::Headers preflight = {{"Origin", kOrigin},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization,content-type,x-stainless-os"}};
  auto known = client.Options("/v1/chat/completions", preflight);
  ASSERT_TRUE(known);
  EXPECT_EQ(known->status, 204);
  EXPECT_EQ(known->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  EXPECT_EQ(known->get_header_value("Vary"), "Origin");
  EXPECT_NE(known->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(known->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type,x-stainless-os");
  // An unknown path is answered the same way: a preflight tells nothing about which routes exist.
  auto unknown = client.Options("/v1/secret-route", preflight);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, known->status);
  EXPECT_EQ(unknown->body, known->body);
  // Without a key the real requests are 401 on every path, known or not, with the CORS header so the page can read it.
  for (const char* path : {"/v1/models", "/v1/secret-route"}) {
    auto res = client.Get(path, {{"Origin", kOrigin}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), kOrigin) << path;
  }
  // Another origin is refused at the preflight, and its answers name no origin.
  auto foreign = client.Options("/v1/chat/completions",
                                {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->status, 403);
  EXPECT_FALSE(foreign->has_header("Access-Control-Allow-Origin"));
  auto served =
      client.Post("/v1/chat/completions", with_key({{"Origin", kOrigin}}),
                  R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})", "application/json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;
  EXPECT_EQ(served->get_header_value("Access-Control-Allow-Origin"), kOrigin);
}

// OpenAI's API reference: legacy completions without max_tokens generate at most 16 tokens (this server's
// --max-tokens, 64, is for chat and responses).
TEST_F(ClientsTest, CompletionsWithoutMaxTokensStopAtSixteen) {
  auto res = server_->client().Post("/v1/completions", with_key(),
                                    R"({"prompt": "Once upon a time", "ignore_eos": true})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json reply = Json::parse(res->body);
  EXPECT_EQ(reply["usage"]["completion_tokens"], 16);
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
}

TEST_F(ClientsTest, ModelsByIdNameUnknownModels) {
  auto client = server_->client();
  auto known = client.Get("/v1/models/demo", with_key());
  ASSERT_TRUE(known);
  EXPECT_EQ(known->status, 200);
  EXPECT_EQ(Json::parse(known->body)["id"], "demo");
  auto unknown = client.Get("/v1/models/gpt-4o", with_key());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Json::parse(unknown->body)["error"]["code"], "model_not_found");
}

// A coding agent's request, scaled to the demo's context: max_tokens 8000, a long prompt and 24 tools, streamed.
// The budget is fitted to what the context leaves; the stream is whole and well formed.
TEST_F(ClientsTest, CodingAgentRequestIsServedAsAWellFormedStream) {
  Json tools = Json::array();
  for (int i = 0; i < 24; ++i)
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "tool_" + std::to_string(i)},
                       {"description", "Does step " + std::to_string(i)},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"path", {{"type", "string"}}}, {"line", {{"type", "integer"}}}}},
                         {"required", {"path"}}}}}}});
  std::string file;
  for (int i = 0; i < 40; ++i) file += "line " + std::to_string(i) + ": int x = " + std::to_string(i) + ";\n";
  Json body = {{"model", "demo"},
               {"messages",
                {{{"role", "system"}, {"content", "You are a coding agent."}},
                 {{"role", "user"}, {"content", "Fix this file:\n" + file}}}},
               {"tools", tools},
               {"max_tokens", 8000},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0}};
  // The same request with --context 512 does not fit: use a server whose context does, and bounds the reply (the
  // demo model's own 65536 would let it run to max_tokens).
  ServerProcess roomy({"--no-thinking", "--context", "4096"});
  auto res = roomy.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::istringstream events(res->body);
  std::string line, finish;
  int chunks = 0, prompt_tokens = 0, completion_tokens = 0;
  bool done = false;
  while (std::getline(events, line)) {
    if (line.empty() || line.starts_with(":")) continue;
    ASSERT_TRUE(line.starts_with("data: ")) << line;
    ASSERT_FALSE(done) << "data after [DONE]";
    if (line == "data: [DONE]") {
      done = true;
      continue;
    }
    Json chunk = Json::parse(line.substr(6));
    ASSERT_EQ(chunk["object"], "chat.completion.chunk");
    ++chunks;
    for (const auto& choice : chunk["choices"])
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    if (chunk["usage"].is_object()) {
      prompt_tokens = chunk["usage"]["prompt_tokens"];
      completion_tokens = chunk["usage"]["completion_tokens"];
    }
  }
  EXPECT_TRUE(done);
  EXPECT_GT(chunks, 2);
  EXPECT_TRUE(finish == "stop" || finish == "length" || finish == "tool_calls") << finish;
  EXPECT_GT(prompt_tokens, 1000);
  EXPECT_LE(prompt_tokens + completion_tokens, 4096);
}

}  // namespace
}  // namespace duet::testing
