// The reproductions of the HTTP hardening issue that the current transport answers, each against its own
// `duet serve` on the demo model: a small request must never crash the server or blow up its memory.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("duet-hostile-" + std::to_string(getpid()) + "-" + name)).string();
}

// curl's status line and body for a POST of the file at `body_path` with extra headers.
struct CurlAnswer {
  int status = 0;
  Json body;
};
CurlAnswer curl_post_file(const ServerProcess& server, const std::string& route, const std::string& body_path,
                          const std::string& headers) {
  std::string out = temp_file("answer.json");
  auto result =
      run_command("curl -sS --max-time 60 -o " + out + " -w '%{http_code}' -H 'Content-Type: application/json' " +
                  headers + " --data-binary @" + body_path + " " + server.url() + route);
  CurlAnswer answer;
  answer.status = std::atoi(result.output.c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  answer.body = Json::parse(text, nullptr, false);
  return answer;
}

// Tool-call arguments are a JSON document inside a string: 100,000 levels of it once overflowed the stack of
// the thread that converted it (SIGSEGV). Now it is refused by name, through chat and through /tokenize.
TEST(HostileHttp, DeepJsonInsideAStringIsRefusedNotACrash) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--max-body-bytes", "1048576"});
  const int depth = 100000;
  std::string arguments = "{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
  Json messages = {{{"role", "assistant"},
                    {"content", ""},
                    {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", arguments}}}}}}},
                   {{"role", "user"}, {"content", "hi"}}};
  std::string path = temp_file("deep.json");
  for (const char* route : {"/v1/chat/completions", "/tokenize"}) {
    Json body = {{"messages", messages}};
    if (std::string(route) != "/tokenize") body["max_tokens"] = 8;
    std::ofstream(path) << body.dump();
    CurlAnswer answer = curl_post_file(server, route, path, "");
    EXPECT_EQ(answer.status, 400) << route;
    EXPECT_EQ(answer.body["error"]["param"], "messages[0].tool_calls[0].function.arguments") << route << answer.body;
    ASSERT_TRUE(server.alive()) << route << "; log: " << server.log_path();
  }
  // The same arguments at a legal depth still render.
  messages[0]["tool_calls"][0]["function"]["arguments"] = R"({"a": [[1]]})";
  std::ofstream(path) << Json{{"messages", messages}}.dump();
  EXPECT_EQ(curl_post_file(server, "/tokenize", path, "").status, 200);
}

// Was (issue 24, 2): an object of 25k / 50k / 100k keys took 0.34 / 1.84 / 7.85 s to parse on any POST route (the
// whole body first, then the fields), holding other requests meanwhile. Now every route refuses it while reading,
// 413 naming the limit and where it was passed, and the same body one key short is read (the control).
TEST(HostileHttp, ObjectsOfTooManyKeysAreRefusedByNameOnEveryPostRoute) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--context", "256"});
  Json many = Json::object();
  for (int i = 0; i <= 10000; ++i) many[std::string("k").append(std::to_string(i))] = i;
  const std::string path = temp_file("keys.json");
  std::ofstream(path) << Json{{"x", {{"y", many}}}}.dump();
  for (const char* route : {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                            "/v1/messages/count_tokens", "/tokenize", "/detokenize", "/v1/systemone"}) {
    CurlAnswer answer = curl_post_file(server, route, path, "");
    EXPECT_EQ(answer.status, 413) << route << answer.body;
    EXPECT_NE(answer.body.dump().find("more than 10000 keys in one object (at `x.y`)"), std::string::npos)
        << route << answer.body;
  }
  many.erase("k0");
  std::ofstream(path) << Json{{"x", {{"y", many}}}}.dump();
  CurlAnswer control = curl_post_file(server, "/tokenize", path, "");
  EXPECT_EQ(control.status, 400) << control.body;  // read, then refused for its missing prompt
  EXPECT_EQ(control.body["error"]["param"], "prompt") << control.body;
  ASSERT_TRUE(server.alive()) << server.log_path();
}

// 100 MB of zeros gzip to about 100 KB. The body is refused unread (415), with or without a key, and when keys
// are set a request without one is 401 before anything else: memory stays where it was.
TEST(HostileHttp, CompressedBodiesAreRefusedUnread) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--api-key", "k"});
  std::string bomb = temp_file("bomb.gz");
  ASSERT_EQ(run_command("head -c 100000000 /dev/zero | gzip -c > " + bomb).status, 0);
  const double before = server.resident_mb("k");
  ASSERT_GT(before, 0);
  CurlAnswer with_key =
      curl_post_file(server, "/v1/chat/completions", bomb, "-H 'Authorization: Bearer k' -H 'Content-Encoding: gzip'");
  EXPECT_EQ(with_key.status, 415);
  EXPECT_EQ(with_key.body["error"]["code"], "unsupported_content_encoding");
  CurlAnswer without_key = curl_post_file(server, "/v1/chat/completions", bomb, "-H 'Content-Encoding: gzip'");
  EXPECT_EQ(without_key.status, 401);
  EXPECT_EQ(without_key.body["error"]["code"], "invalid_api_key");
  ASSERT_TRUE(server.alive()) << server.log_path();
  const double after = server.resident_mb("k");
  EXPECT_LT(after - before, 20.0) << "resident memory grew from " << before << " MB to " << after << " MB";
}

// With keys set, a request without one learns nothing about which routes exist.
TEST(HostileHttp, UnknownRoutesAndMethodsNeedTheKeyToo) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--api-key", "k"});
  auto client = server.client();
  EXPECT_EQ(client.Get("/no-such-route")->status, 401);
  EXPECT_EQ(client.Get("/v1/chat/completions")->status, 401);
  EXPECT_EQ(client.Get("/no-such-route", {{"Authorization", "Bearer k"}})->status, 404);
  EXPECT_EQ(client.Get("/v1/chat/completions", {{"Authorization", "Bearer k"}})->status, 405);
  EXPECT_EQ(client.Get("/health")->status, 200);
}

}  // namespace
}  // namespace duet::testing
