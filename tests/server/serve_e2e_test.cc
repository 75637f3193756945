// End to end: `duet serve` on the demo model, talked to over HTTP with curl, the OpenAI npm client and
// httplib: answers, streams, every error case, cancellation, and 32 concurrent requests.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

// Writes a request body to a file curl reads with -d @file (no shell quoting of JSON).
std::string body_file(const std::string& name, const std::string& body) {
  auto path = std::filesystem::temp_directory_path() / ("duet-e2e-" + std::to_string(getpid()) + "-" + name);
  std::ofstream(path) << body;
  return path.string();
}

std::string curl_post(const ServerProcess& server, const std::string& route, const std::string& body,
                      const std::string& extra = "") {
  auto file = body_file("curl.json", body);
  return run_command("curl -sS -N --max-time 60 -H 'Content-Type: application/json' " + extra + " -d @" + file + " " +
                     server.url() + route)
      .output;
}

Json post_json(const ServerProcess& server, const std::string& route, const Json& body, int expect_status) {
  auto client = server.client();
  auto res = client.Post(route.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << route;
  if (!res) return Json();
  EXPECT_EQ(res->status, expect_status) << route << " " << res->body;
  return Json::parse(res->body, nullptr, false);
}

// The error object of a response that must be a JSON error with this status.
Json expect_error(const httplib::Result& res, int status) {
  EXPECT_TRUE(res);
  if (!res) return Json();
  EXPECT_EQ(res->status, status) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  Json body = Json::parse(res->body, nullptr, false);
  EXPECT_TRUE(body.is_object() && body.contains("error")) << res->body;
  if (!body.is_object() || !body.contains("error")) return Json();
  for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(body["error"].contains(key)) << key;
  return body["error"];
}

const Json kChat = {
    {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}, {"max_tokens", 8}, {"temperature", 0}};

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!demo_model_available()) return;
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--no-thinking", "--context", "1024", "--max-tokens", "256", "--max-body-bytes", "65536"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->alive()) << "the server died; log: " << server_->log_path();
    }
  }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> ServeTest::server_;

TEST_F(ServeTest, CurlChat) {
  Json reply = Json::parse(curl_post(*server_, "/v1/chat/completions", kChat.dump()));
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["model"], "demo");
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(reply["choices"][0]["message"]["content"].is_string());
  EXPECT_LE(reply["usage"]["completion_tokens"].get<int>(), 8);
  EXPECT_EQ(reply["usage"]["total_tokens"].get<int>(),
            reply["usage"]["prompt_tokens"].get<int>() + reply["usage"]["completion_tokens"].get<int>());
}

TEST_F(ServeTest, CurlChatStream) {
  Json body = kChat;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  std::string out = curl_post(*server_, "/v1/chat/completions", body.dump());
  ASSERT_TRUE(out.ends_with("data: [DONE]\n\n")) << out;
  std::vector<Json> chunks;
  std::stringstream events(out);
  for (std::string line; std::getline(events, line);)
    if (line.starts_with("data: {")) chunks.push_back(Json::parse(line.substr(6)));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_GT(chunks.back()["usage"]["prompt_tokens"].get<int>(), 0);
  auto finish = chunks[chunks.size() - 2]["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
  // Streamed text equals the whole answer (greedy).
  std::string streamed;
  for (auto& chunk : chunks)
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content"))
      streamed += chunk["choices"][0]["delta"]["content"].get<std::string>();
  Json whole = post_json(*server_, "/v1/chat/completions", kChat, 200);
  EXPECT_EQ(streamed, whole["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(ServeTest, CurlCompletionsWithTokenIdsSeedAndLogprobs) {
  Json body = {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 6}, {"temperature", 0.9},      {"seed", 42},
               {"ignore_eos", true},        {"logprobs", 2},   {"return_token_ids", true}};
  Json first = Json::parse(curl_post(*server_, "/v1/completions", body.dump()));
  Json second = Json::parse(curl_post(*server_, "/v1/completions", body.dump()));
  EXPECT_EQ(first["object"], "text_completion");
  EXPECT_EQ(first["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(first["choices"][0]["token_ids"].size(), 6u);
  EXPECT_EQ(first["choices"][0]["token_ids"], second["choices"][0]["token_ids"]);  // same seed, same draw
  EXPECT_EQ(first["usage"]["prompt_tokens"], 5);
  auto& logprobs = first["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"].size(), 6u);
  EXPECT_EQ(logprobs["token_logprobs"].size(), 6u);
  EXPECT_EQ(logprobs["top_logprobs"][0].size(), 2u);
}

TEST_F(ServeTest, CurlErrors) {
  Json error = Json::parse(curl_post(*server_, "/v1/chat/completions", "{not json"));
  EXPECT_EQ(error["error"]["code"], "invalid_json");
  std::string status = run_command("curl -s -o /dev/null -w '%{http_code}' " + server_->url() + "/nope").output;
  EXPECT_EQ(status, "404");
}

TEST_F(ServeTest, StopStringsCutTheText) {
  Json body = {{"prompt", "The weather today is"},
               {"max_tokens", 16},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", 0}};
  Json full = post_json(*server_, "/v1/completions", body, 200);
  std::string text = full["choices"][0]["text"];
  std::string stop;
  for (size_t i = 3; i < full["choices"][0]["logprobs"]["tokens"].size() && stop.empty(); ++i) {
    std::string token = full["choices"][0]["logprobs"]["tokens"][i];
    if (token.find_first_not_of(" \n") != std::string::npos && token.find("\xEF\xBF\xBD") == std::string::npos)
      stop = token;
  }
  ASSERT_FALSE(stop.empty()) << "the demo model's greedy text has no usable stop string: " << text;
  body["stop"] = stop;
  Json stopped = post_json(*server_, "/v1/completions", body, 200);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
}

TEST_F(ServeTest, ToolsReachTheTemplate) {
  Json body = kChat;
  body["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  Json with_tools = post_json(*server_, "/v1/chat/completions", body, 200);
  Json without = post_json(*server_, "/v1/chat/completions", kChat, 200);
  EXPECT_GT(with_tools["usage"]["prompt_tokens"].get<int>(), without["usage"]["prompt_tokens"].get<int>() + 50);
  body["tool_choice"] = "none";
  Json none = post_json(*server_, "/v1/chat/completions", body, 200);
  EXPECT_EQ(none["usage"]["prompt_tokens"], without["usage"]["prompt_tokens"]);
}

TEST_F(ServeTest, ThinkingSplitsReasoning) {
  Json body = kChat;
  body["chat_template_kwargs"] = {{"enable_thinking", true}};
  Json reply = post_json(*server_, "/v1/chat/completions", body, 200);
  EXPECT_TRUE(reply["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ServeTest, StatusRoutes) {
  auto client = server_->client();
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  Json list = Json::parse(models->body);
  EXPECT_EQ(list["data"][0]["id"], "demo");
  EXPECT_EQ(list["data"][0]["max_model_len"], 1024);
  EXPECT_EQ(client.Get("/v1/models/demo")->status, 200);
  expect_error(client.Get("/v1/models/other"), 404);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* name :
       {"duet_requests_total", "duet_generated_tokens_total", "duet_requests_waiting", "duet_engine_step_seconds_total",
        "duet_state_pool_bytes", "duet_process_resident_bytes", "duet_http_responses_total"})
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
}

TEST_F(ServeTest, TokenizeAndDetokenize) {
  Json tokens = post_json(*server_, "/tokenize", {{"prompt", "Hello world"}}, 200);
  ASSERT_GT(tokens["count"].get<int>(), 0);
  Json text = post_json(*server_, "/detokenize", {{"tokens", tokens["tokens"]}}, 200);
  EXPECT_EQ(text["prompt"], "Hello world");
  Json chat = post_json(*server_, "/tokenize", {{"messages", kChat["messages"]}}, 200);
  EXPECT_GT(chat["count"].get<int>(), tokens["count"].get<int>());
  auto client = server_->client();
  EXPECT_EQ(expect_error(client.Post("/detokenize", R"({"tokens": [99999999]})", "application/json"), 400)["param"],
            "tokens[0]");
  EXPECT_EQ(expect_error(client.Post("/tokenize", R"({})", "application/json"), 400)["param"], "prompt");
}

TEST_F(ServeTest, ErrorsHaveOpenAisShapeAndStatus) {
  auto client = server_->client();
  auto post = [&](const char* route, const std::string& body) { return client.Post(route, body, "application/json"); };
  EXPECT_EQ(expect_error(post("/v1/chat/completions", "{"), 400)["code"], "invalid_json");
  EXPECT_EQ(expect_error(post("/v1/chat/completions", "[]"), 400)["code"], "invalid_json");
  EXPECT_EQ(expect_error(post("/v1/chat/completions", R"({"messages": "hi"})"), 400)["param"], "messages");
  EXPECT_EQ(expect_error(post("/v1/chat/completions",
                              R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})"),
                         400)["param"],
            "temperature");
  EXPECT_EQ(expect_error(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 30})"),
                         400)["param"],
            "n");
  // An unknown field is ignored (ignored_fields_e2e_test.cc), a known one of the wrong type is not.
  EXPECT_EQ(expect_error(post("/v1/chat/completions",
                              R"({"messages": [{"role": "user", "content": "x"}], "frobnicate": 1, "seed": "x"})"),
                         400)["param"],
            "seed");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": [1, "a"]})"), 400)["param"], "prompt[1]");
  // Integers beyond 64 bits are read exactly (bodies are parsed as Python's json.loads would) and refused by name.
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": [123456789012345678901234]})"), 400)["param"],
            "prompt[0]");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "x", "seed": 123456789012345678901234})"), 400)["param"],
            "seed");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "x", "temperature": 123456789012345678901234})"),
                         400)["param"],
            "temperature");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": ["a", "b"]})"), 400)["param"], "prompt");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "x", "echo": true})"), 400)["param"], "echo");
  Json model = expect_error(post("/v1/completions", R"({"prompt": "x", "model": "gpt-4"})"), 404);
  EXPECT_EQ(model["code"], "model_not_found");
  EXPECT_EQ(model["param"], "model");
  EXPECT_EQ(expect_error(post("/v1/no-such-route", "{}"), 404)["code"], "not_found");
  EXPECT_EQ(expect_error(client.Get("/v1/chat/completions"), 405)["code"], "method_not_allowed");
  EXPECT_EQ(client.Get("/v1/chat/completions")->get_header_value("Allow"), "POST");
  expect_error(client.Delete("/v1/models"), 405);
  // Larger than --max-body-bytes: refused from Content-Length, before the body is read.
  auto big = post("/v1/completions", R"({"prompt": ")" + std::string(70000, 'a') + R"("})");
  EXPECT_EQ(expect_error(big, 413)["code"], "request_too_large");
  // A Range header does not cut a JSON answer.
  auto ranged = client.Get("/health", {{"Range", "bytes=0-3"}});
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->body, R"({"status":"ok"})");
  // No request path reaches the filesystem.
  expect_error(client.Get("/../../etc/passwd"), 404);
  expect_error(client.Get("/v1/models/../../../etc/passwd"), 404);
}

// A budget larger than the context leaves is fitted to it (the server runs with --context 1024); only a prompt
// that alone fills the context is refused.
TEST_F(ServeTest, MaxTokensIsFittedAndOnlyAFullPromptOverflows) {
  auto client = server_->client();
  Json body = {{"prompt", std::vector<int>(1000, 7)}, {"max_tokens", 100000}, {"ignore_eos", true}};
  auto fitted = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(fitted);
  ASSERT_EQ(fitted->status, 200) << fitted->body;
  Json reply = Json::parse(fitted->body);
  EXPECT_EQ(reply["usage"]["completion_tokens"], 24);
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  body = {{"prompt", std::vector<int>(1024, 7)}, {"max_tokens", 1}};
  Json error = expect_error(client.Post("/v1/completions", body.dump(), "application/json"), 400);
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_EQ(error["param"], "prompt");
}

TEST_F(ServeTest, ThirtyTwoConcurrentRequestsOfMixedLengthsAllFinish) {
  std::vector<std::thread> threads;
  std::atomic<int> ok = 0;
  for (int i = 0; i < 32; ++i)
    threads.emplace_back([&, i] {
      int max_tokens = 1 + (i * 7) % 24;
      Json body = {{"prompt", std::vector<int>(static_cast<size_t>(1 + (i * 37) % 300), 100 + i)},
                   {"max_tokens", max_tokens},
                   {"ignore_eos", true},
                   {"temperature", i % 2 ? 0.7 : 0.0},
                   {"seed", i},
                   {"stream", i % 3 == 0}};
      auto res = server_->client().Post("/v1/completions", body.dump(), "application/json");
      if (!res || res->status != 200) return;
      if (i % 3 == 0) {
        if (res->body.ends_with("data: [DONE]\n\n") &&
            res->body.find("\"finish_reason\":\"length\"") != std::string::npos)
          ++ok;
        return;
      }
      Json reply = Json::parse(res->body);
      if (reply["usage"]["completion_tokens"] == max_tokens && reply["choices"][0]["finish_reason"] == "length") ++ok;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok, 32);
}

TEST_F(ServeTest, OfficialOpenAiClient) {
  std::string node_modules = tests_dir() + "/node_modules/openai";
  if (!std::filesystem::exists(node_modules))
    FAIL() << "the openai npm package is not installed: run scripts/test-deps.sh";
  auto result = run_command("node " + tests_dir() + "/server/openai_client.mjs " + server_->url() + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("openai client: ok"), std::string::npos) << result.output;
}

// A server with keys: everything but /health needs one.
TEST(ServeKeys, MissingOrWrongKeyIs401) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  auto key_file = body_file("keys.txt", "\n  second-key  \n");
  ServerProcess server({"--api-key", "first-key", "--api-key-file", key_file});
  auto client = server.client();
  EXPECT_EQ(client.Get("/health")->status, 200);
  EXPECT_EQ(expect_error(client.Get("/v1/models"), 401)["code"], "invalid_api_key");
  EXPECT_EQ(expect_error(client.Get("/metrics"), 401)["type"], "authentication_error");
  expect_error(client.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json"), 401);
  expect_error(client.Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401);
  expect_error(client.Get("/v1/models", {{"Authorization", "first-key"}}), 401);
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer first-key"}})->status, 200);
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer second-key"}})->status, 200);
  std::string curl = run_command("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer second-key' " +
                                 server.url() + "/v1/models")
                         .output;
  EXPECT_EQ(curl, "200");
}

// One slot and a queue of one: the next request is refused with 429 + Retry-After, and a stream whose
// client goes away frees the slot for the next request.
TEST(ServeSlots, FullQueueIs429AndACancelledStreamFreesItsSlot) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--parallel", "1", "--queue-limit", "1", "--context", "4096", "--max-tokens", "4000"});
  Json long_stream = {{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};

  std::atomic<bool> release = false;
  std::atomic<int> started = 0;
  auto hold_stream = [&] {
    httplib::Client client("127.0.0.1", server.port());
    client.set_read_timeout(120);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = long_stream.dump();
    req.set_header("Content-Type", "application/json");
    bool counted = false;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (!counted) {
        counted = true;
        ++started;
      }
      return !release.load();  // returning false drops the connection mid-stream
    };
    httplib::Response res;
    httplib::Error error;
    client.send(req, res, error);
  };
  std::thread running(hold_stream);
  while (started < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::thread waiting(hold_stream);
  for (int i = 0; i < 500 && server.metric("duet_requests_waiting").value_or(0) < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(server.metric("duet_requests_waiting"), 1);

  auto refused = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  EXPECT_EQ(expect_error(refused, 429)["code"], "rate_limit_exceeded");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");

  // Both clients hang up; their sequences are cancelled, and the next request is admitted and completes.
  release = true;
  running.join();
  waiting.join();
  for (int i = 0; i < 500 && server.metric("duet_requests_cancelled_total").value_or(0) < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.metric("duet_requests_cancelled_total"), 2);
  auto next = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3, "ignore_eos": true})",
                                   "application/json");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
  // The answer goes out when the request finishes; its slot is freed right after, in the same engine step.
  EXPECT_EQ(server.wait_for_metric("duet_requests_running", [](double running) { return running == 0; }), 0);
  EXPECT_TRUE(server.alive());
}

}  // namespace
}  // namespace duet::testing
