// What an operator sees: the context a server without --context takes (the demo model's max_position_embeddings,
// printed in the memory plan), and one access-log line per request (--log-format json) with route, status, tokens,
// time to first token, total time, the client's address and the user the client named.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

// The access-log lines the server wrote so far (JSON objects with a `route`), but for the /health probes of
// ServerProcess's start.
std::vector<Json> access_lines(const ServerProcess& server) {
  std::ifstream in(server.log_path());
  std::vector<Json> lines;
  for (std::string line; std::getline(in, line);) {
    Json parsed = Json::parse(line, nullptr, false);
    if (parsed.is_object() && parsed.contains("route") && parsed["route"] != "/health")
      lines.push_back(std::move(parsed));
  }
  return lines;
}

// The demo model (linked file by file) with a config.json that is a named pipe: the model loader blocks reading it
// until something is written into it, so a test sees the server while it loads.
std::filesystem::path demo_behind_a_pipe(const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "model.safetensors", "generation_config.json",
                           "preprocessor_config.json"})
    std::filesystem::create_symlink(std::filesystem::absolute(demo_model_dir() + "/" + file), dir / file);
  if (mkfifo((dir / "config.json").c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
  return dir;
}

// The one line for `route`: lines are written once their answers are sent, so two answers sent close together
// (a chat's and the next request's) may be logged in either order.
Json line_for(const std::vector<Json>& lines, const std::string& route) {
  Json found;
  for (const Json& line : lines)
    if (line["route"] == route) {
      EXPECT_TRUE(found.is_null()) << "two lines for " << route;
      found = line;
    }
  EXPECT_FALSE(found.is_null()) << "no line for " << route;
  return found;
}

std::string log_text(const ServerProcess& server) {
  std::ifstream in(server.log_path());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Operations, ContextDefaultsToTheModelsLengthAndTheLogNamesEveryRequest) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--log-format", "json", "--no-thinking"});
  auto client = server.client();

  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["max_model_len"], 65536);  // models/demo/config.json's
  EXPECT_NE(log_text(server).find("context 65536 positions per sequence (model: 65536)"), std::string::npos)
      << log_text(server);

  const Json body = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                     {"max_tokens", 5},
                     {"ignore_eos", true},
                     {"user", "user-7"},
                     {"safety_identifier", "sid \"quoted\""}};
  auto chat = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const Json usage = Json::parse(chat->body)["usage"];
  auto missing = client.Get("/v1/nothing-here");
  ASSERT_TRUE(missing);
  const Json decision_body = {
      {"model", "demo"},
      {"state", "Checkout fails with error 502 since 09:14 UTC."},
      {"questions", {{"urgent", {{"type", "noul"}, {"instructions", "Is the ticket urgent?"}}}}}};
  auto decision = client.Post("/v1/systemone", decision_body.dump(), "application/json");
  ASSERT_TRUE(decision);
  ASSERT_EQ(decision->status, 200) << decision->body;
  // The answer says where its time went (Server-Timing, milliseconds), as its log line does (checked below).
  const std::string timing = decision->get_header_value("Server-Timing");
  double prefill_ms = -1, head_ms = -1;
  ASSERT_EQ(std::sscanf(timing.c_str(), "prefill;dur=%lf, head;dur=%lf", &prefill_ms, &head_ms), 2) << timing;
  EXPECT_GT(prefill_ms, 0);
  EXPECT_GT(head_ms, 0);
  EXPECT_TRUE(chat->get_header_value("Server-Timing").empty());  // chat's answers carry none

  std::vector<Json> lines;
  for (int i = 0; i < 100 && lines.size() < 4; ++i) {  // a line is written once its answer is sent
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lines = access_lines(server);
  }
  ASSERT_EQ(lines.size(), 4u) << log_text(server);
  const Json listing = line_for(lines, "/v1/models");
  EXPECT_EQ(listing["method"], "GET");
  EXPECT_EQ(listing["status"], 200);
  const Json generation = line_for(lines, "/v1/chat/completions");
  EXPECT_EQ(generation["status"], 200);
  EXPECT_EQ(generation["prompt_tokens"], usage["prompt_tokens"]);
  EXPECT_EQ(generation["completion_tokens"], 5);
  EXPECT_EQ(generation["cached_tokens"], 0);
  EXPECT_GT(generation["ttft_s"].get<double>(), 0);
  EXPECT_GE(generation["total_s"].get<double>(), generation["ttft_s"].get<double>());
  EXPECT_TRUE(generation["client"].get<std::string>().starts_with("127.0.0.1:")) << generation;
  EXPECT_EQ(generation["user"], "user-7");
  EXPECT_EQ(generation["safety_identifier"], "sid \"quoted\"");
  EXPECT_EQ(line_for(lines, "unmatched")["status"], 404);
  EXPECT_FALSE(generation.contains("prefill_s")) << generation;  // a decision's phases only
  // A decision's line says where its time went: to its last prompt chunk, then to its answer.
  const Json decided = line_for(lines, "/v1/systemone");
  EXPECT_EQ(decided["status"], 200);
  EXPECT_EQ(decided["prompt_tokens"], Json::parse(decision->body)["usage"]["input_tokens"]);
  ASSERT_TRUE(decided.contains("prefill_s") && decided.contains("head_s")) << decided;
  EXPECT_GT(decided["prefill_s"].get<double>(), 0);
  EXPECT_GT(decided["head_s"].get<double>(), 0);
  EXPECT_LE(decided["prefill_s"].get<double>() + decided["head_s"].get<double>(), decided["total_s"].get<double>());
  EXPECT_NEAR(decided["prefill_s"].get<double>() * 1e3, prefill_ms, 0.06);
  EXPECT_NEAR(decided["head_s"].get<double>() * 1e3, head_ms, 0.06);
}

// While the model loads the server already answers: /health 503 `loading`, other routes 503 `model_loading`. The
// load is held back by a config.json that is a named pipe: the model loader blocks reading it until the test
// writes the demo's config into it.
// The prompt cache over HTTP: a conversation's second turn resumes its first turn's prompt (usage says how many
// tokens), its answer is the one a server without a cache gives, and /metrics and the memory plan show the cache;
// `--prompt-cache-gib 0` turns it off.
TEST(Operations, TheSecondTurnReportsCachedTokensAndAnswersAsWithoutACache) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess cached({"--no-thinking", "--prompt-cache-gib", "0.05"});
  ServerProcess off({"--no-thinking", "--prompt-cache-gib", "0"});
  EXPECT_NE(log_text(cached).find("+ prompt cache "), std::string::npos) << log_text(cached);
  EXPECT_NE(log_text(off).find("+ prompt cache off"), std::string::npos) << log_text(off);
  std::string long_text;
  for (int i = 0; i < 40; ++i)
    long_text += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  Json messages = {{{"role", "system"}, {"content", long_text}}, {{"role", "user"}, {"content", "Say something."}}};
  auto ask = [&](ServerProcess& server, const Json& history) {
    const Json body = {{"messages", history}, {"max_tokens", 8}, {"ignore_eos", true}, {"temperature", 0}};
    auto reply = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
    if (!reply || reply->status != 200) throw std::runtime_error(reply ? reply->body : "no answer");
    return Json::parse(reply->body);
  };
  const Json first = ask(cached, messages);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(first["choices"][0]["message"]["content"], ask(off, messages)["choices"][0]["message"]["content"]);
  messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "And once more."}});
  const Json second = ask(cached, messages), second_off = ask(off, messages);
  const int cached_tokens = second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached_tokens, 0) << second;
  EXPECT_EQ(cached_tokens % 64, 0);
  EXPECT_LT(cached_tokens, second["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(second_off["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second["choices"][0]["message"]["content"], second_off["choices"][0]["message"]["content"]);
  auto metrics = cached.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  // A sample line: `name{model="..."} value`.
  auto value_of = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + "{");
    if (at == std::string::npos) return -1.0;
    return std::stod(metrics->body.substr(metrics->body.find("} ", at) + 2));
  };
  EXPECT_EQ(value_of("duet_prompt_cache_hits_total"), 1) << metrics->body;
  EXPECT_EQ(value_of("duet_prompt_cache_misses_total"), 1);
  EXPECT_EQ(value_of("duet_prompt_cache_tokens_total"), cached_tokens);
  EXPECT_GT(value_of("duet_prompt_cache_bytes_held"), 0);
}

// The prompt cache's host tier over HTTP (--prompt-cache-host-gib): a device tier of one GDN snapshot, so the other
// conversation's first turn pushes this one's entries out to the host tier; its second turn resumes from there,
// reports cached tokens, answers as a server without a cache does, and /metrics and the memory plan show the tier.
TEST(Operations, ASecondTurnResumesFromTheHostTier) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess tiered({"--no-thinking", "--prompt-cache-gib", "0.0015", "--prompt-cache-host-gib", "0.1"});
  ServerProcess off({"--no-thinking", "--prompt-cache-gib", "0"});
  EXPECT_NE(log_text(tiered).find("(1 GDN snapshots + "), std::string::npos) << log_text(tiered);
  EXPECT_NE(log_text(tiered).find("+ its host tier "), std::string::npos) << log_text(tiered);
  auto conversation = [](const std::string& name) {
    std::string text = "This is conversation " + name + ". ";
    for (int i = 0; i < 40; ++i)
      text += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
    return Json{{{"role", "system"}, {"content", text}}, {{"role", "user"}, {"content", "Say something."}}};
  };
  auto ask = [&](ServerProcess& server, const Json& history) {
    const Json body = {{"messages", history}, {"max_tokens", 8}, {"ignore_eos", true}, {"temperature", 0}};
    auto reply = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
    if (!reply || reply->status != 200) throw std::runtime_error(reply ? reply->body : "no answer");
    return Json::parse(reply->body);
  };
  Json a = conversation("A"), b = conversation("B");
  const Json first = ask(tiered, a);
  ask(tiered, b);  // pushes A's entries to the host tier
  a.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  a.push_back({{"role", "user"}, {"content", "And once more."}});
  const Json second = ask(tiered, a);
  const int cached_tokens = second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached_tokens, 0) << second;
  EXPECT_EQ(second["choices"][0]["message"]["content"], ask(off, a)["choices"][0]["message"]["content"]);
  auto metrics = tiered.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  auto value_of = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + "{");
    if (at == std::string::npos) return -1.0;
    return std::stod(metrics->body.substr(metrics->body.find("} ", at) + 2));
  };
  EXPECT_EQ(value_of("duet_prompt_cache_host_hits_total"), 1) << metrics->body;
  EXPECT_EQ(value_of("duet_prompt_cache_hits_total"), 1);
  EXPECT_GT(value_of("duet_prompt_cache_evictions_total"), 0);
  EXPECT_GT(value_of("duet_prompt_cache_host_bytes_held"), 0);
  EXPECT_GT(value_of("duet_prompt_cache_host_bytes"), 0);
  EXPECT_EQ(value_of("duet_prompt_cache_host_evictions_total"), 0);
}

TEST(Operations, HealthSaysLoadingUntilTheModelIsLoaded) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  const auto dir = demo_behind_a_pipe("duet-loading-");
  const auto fifo = dir / "config.json";

  // --no-vision: the demo's vision tower would read config.json a second time (model/vision_model.cc), and the pipe
  // is written once.
  ServerProcess server({"--no-thinking", "--no-vision"}, dir.string(), /*wait_until_ready=*/false);
  auto client = server.client();
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Json::parse(health->body)["status"], "loading");
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 503);
  EXPECT_EQ(Json::parse(models->body)["error"]["code"], "model_loading");
  EXPECT_EQ(models->get_header_value("Retry-After"), "1");

  {
    std::ifstream config(demo_model_dir() + "/config.json");
    std::ofstream(fifo) << config.rdbuf();  // the loader goes on
  }
  int status = 0;
  for (int i = 0; i < 1200 && status != 200; ++i) {
    if (auto res = client.Get("/health")) status = res->status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
  auto ready = client.Get("/v1/models");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  std::filesystem::remove_all(dir);
}

// A stop signal while the model loads ends the process at once (status 0), without waiting for the load.
TEST(Operations, SigtermWhileLoadingExits) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  const auto dir = demo_behind_a_pipe("duet-loading-stop-");  // the pipe is never written: the load waits for ever
  ServerProcess server({}, dir.string(), /*wait_until_ready=*/false);
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  server.send_signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(5)), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace duet::testing
