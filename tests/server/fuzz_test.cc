// Fuzz: 2,000 (DUET_FUZZ_BODIES) generated malformed or hostile bodies to each POST route of `duet serve`. Every
// answer must be a 4xx JSON error in OpenAI's shape (or a 200 where the body happens to be valid), and the server must
// be up at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "hostile_bodies.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

constexpr int kClients = 4;

// 2,000 in ctest; the reliability benchmark runs 100,000 (DUET_FUZZ_BODIES=100000, docs/benchmarks.md).
int bodies_per_route() {
  const char* value = std::getenv("DUET_FUZZ_BODIES");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 2000;
}

struct RouteCase {
  const char* route;
  std::vector<Json> valid;
};

std::vector<RouteCase> routes() {
  Json messages = Json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}}}}}])");
  return {
      {"/v1/chat/completions",
       {{{"messages", messages}, {"max_tokens", 1}},
        {{"messages", messages},
         {"max_tokens", 1},
         {"temperature", 0.5},
         {"seed", 3},
         {"stop", {"a"}},
         {"logprobs", true},
         {"top_logprobs", 2}},
        {{"messages", messages},
         {"tools", tools},
         {"tool_choice", "auto"},
         {"max_completion_tokens", 1},
         {"chat_template_kwargs", {{"enable_thinking", false}}}}}},
      {"/v1/completions",
       {{{"prompt", "Hello"}, {"max_tokens", 1}},
        {{"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"logprobs", 1}, {"top_k", 5}, {"min_p", 0.1}},
        {{"prompt", {{5, 6}}},
         {"max_tokens", 1},
         {"repetition_penalty", 1.2},
         {"presence_penalty", 0.5},
         {"frequency_penalty", 0.5},
         {"top_p", 0.9}}}},
      {"/tokenize", {{{"prompt", "Hello world"}}, {{"messages", messages}, {"tools", tools}}}},
      {"/detokenize", {{{"tokens", {1, 2, 3}}}, {{"tokens", Json::array()}}}},
      {"/v1/systemone",
       {{{"model", "demo"}, {"state", "Hi"}, {"questions", {{"q", {{"type", "noul"}}}}}},
        {{"model", "demo"},
         {"state", {{"a", {1, 2.5, nullptr}}}},
         {"raw", true},
         {"questions",
          {{"c", {{"type", "choice"}, {"instructions", "Which?"}, {"criteria", {{"x", "ex"}, {"y", nullptr}}}}},
           {"s", {{"type", "score"}, {"criteria", {"lo", "hi"}}}}}}}}},
  };
}

TEST(ServeFuzz, HostileBodiesGet4xxJsonAndTheServerStaysUp) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  // A small prompt cache: its GDN snapshot states are made as it fills (up to its budget, by design), which the
  // growth bound below would otherwise count; at 0.03 GiB they are at most ~8 MB and the cache is still exercised.
  ServerProcess server(
      {"--max-tokens", "2", "--context", "512", "--max-body-bytes", "65536", "--prompt-cache-gib", "0.03"});
  const int kBodiesPerRoute = bodies_per_route();
  const double resident_before = server.resident_mb();
  uint64_t route_seed = 0;
  for (const auto& route : routes()) {
    ++route_seed;
    HostileBodies bodies(route.valid);
    std::atomic<int> next = 0, ok = 0, refused = 0;
    std::mutex failures_mutex;
    std::vector<std::string> failures;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c)
      clients.emplace_back([&] {
        auto client = server.client();
        client.set_keep_alive(true);
        for (int i = next++; i < kBodiesPerRoute; i = next++) {
          HostileBody body = bodies.make(route_seed, static_cast<uint64_t>(i));
          httplib::Headers headers;
          if (!body.content_type.empty()) headers.emplace("Content-Type", body.content_type);
          auto res = client.Post(route.route, headers, body.body, body.content_type.c_str());
          std::string problem;
          if (!res) {
            problem = "no answer (" + httplib::to_string(res.error()) + ")";
          } else if (res->status == 200) {
            ++ok;
          } else if (res->status >= 400 && res->status < 500) {
            Json error = Json::parse(res->body, nullptr, false);
            if (!error.is_object() || !error.contains("error") || !error["error"].is_object() ||
                !error["error"].contains("message") || !error["error"].contains("type"))
              problem = "status " + std::to_string(res->status) + " without a JSON error: " + res->body.substr(0, 200);
            else
              ++refused;
          } else {
            problem = "status " + std::to_string(res->status) + ": " + res->body.substr(0, 200);
          }
          if (!problem.empty()) {
            std::lock_guard lock(failures_mutex);
            failures.push_back(std::string(route.route) + " body " + std::to_string(i) + " (" + body.kind +
                               "): " + problem);
          }
        }
      });
    for (auto& client : clients) client.join();
    EXPECT_TRUE(failures.empty()) << failures.size() << " bad answers, first: " << failures.front();
    EXPECT_EQ(ok + refused, kBodiesPerRoute) << route.route;
    EXPECT_GT(refused, kBodiesPerRoute / 2) << route.route << ": the generator should mostly make bad bodies";
    std::printf("%s: %d bodies, %d answered 200, %d refused with a 4xx JSON error; resident memory %.1f MB\n",
                route.route, kBodiesPerRoute, ok.load(), refused.load(), server.resident_mb());
    ASSERT_TRUE(server.alive()) << "the server died; log: " << server.log_path();
  }
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const double resident_after = server.resident_mb();
  std::printf("resident memory: %.1f MB before, %.1f MB after\n", resident_before, resident_after);
  EXPECT_LT(resident_after - resident_before, 40.0);
}

}  // namespace
}  // namespace duet::testing
