// POST /v1/systemone end to end: `duet serve` on the demo model (which has a joint head), over HTTP. Answers equal
// the goldens of the independent Python reference (same decision, numbers within the end-to-end gate), every kind
// of refusal comes back with its status and code, four concurrent decisions equal the same alone byte for byte,
// instructions of any JSON value are rendered, `--decision-limits reference` takes what the hosted limits refuse,
// and a model folder without a head serves chat but refuses decisions by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

const Json& goldens() {
  static const Json value = [] {
    std::ifstream in(tests_dir() + "/fixtures/decisions/demo.json");
    if (!in) throw std::runtime_error("missing fixture tests/fixtures/decisions/demo.json");
    return Json::parse(in);
  }();
  return value;
}
const Json& golden(const std::string& name) {
  for (const Json& c : goldens().at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("no golden case " + name);
}

struct Reply {
  int status = 0;
  std::string body;
  Json json;
};
Reply post(const ServerProcess& server, const std::string& body) {
  auto res = server.client().Post("/v1/systemone", body, "application/json");
  if (!res) return {};
  return {res->status, res->body, Json::parse(res->body, nullptr, false)};
}

// A body without its report of the tokens the prompt cache resumed, which depends on what ran before.
std::string without_cached_tokens(const std::string& body) {
  static const std::regex report(R"(,"input_tokens_details":\{"cached_tokens":[0-9]+\})");
  return std::regex_replace(body, report, "");
}

class SystemOne : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--context", "1024", "--max-tokens", "256", "--parallel", "4", "--max-body-bytes", "262144"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!server_) FAIL() << "duet serve did not start";
  }
  void TearDown() override {
    EXPECT_TRUE(server_ && server_->alive()) << "the server died; log: " << server_->log_path();
  }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> SystemOne::server_;

TEST_F(SystemOne, ModelsSayDecisions) {
  auto res = server_->client().Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(Json::parse(res->body)["data"][0]["decisions"], true);
}

// Golden requests short enough for --context 1024: the same decisions as Python's, numbers within 1e-4 of its
// unrounded ones (plus one unit of the fourth decimal for rounding).
TEST_F(SystemOne, AnswersEqualTheGoldens) {
  int compared = 0, resumed = 0;
  for (const Json& c : goldens().at("cases")) {
    if (!c.value("forward", false) || c.at("max_length") != 16384 || c.at("usage").at("input_tokens") > 1024) continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    const Reply reply = post(*server_, c.at("body"));
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.json.at("model"), "demo");
    // The prompt cache: every decision's prompt begins with the same fixed text, so most resume its first block(s).
    Json usage = reply.json.at("usage");
    if (usage.contains("input_tokens_details")) {
      const int cached = usage.at("input_tokens_details").at("cached_tokens");
      EXPECT_EQ(cached % 64, 0);
      EXPECT_LT(cached, usage.at("input_tokens").get<int>());
      resumed += cached > 0 ? 1 : 0;
      usage.erase("input_tokens_details");
    }
    EXPECT_EQ(usage, c.at("usage"));
    for (const auto& [id, want] : c.at("answers").items()) {
      const Json& got = reply.json.at("answers").at(id);
      EXPECT_EQ(got.at("type"), want.at("type"));
      if (want.contains("choice")) {
        EXPECT_EQ(got.at("choice"), want.at("choice")) << id;
      }
      if (want.contains("legend")) {
        EXPECT_EQ(got.at("legend"), want.at("legend")) << id;
      }
      for (const char* field : {"noul", "confidence", "score"}) {
        if (want.contains(field)) {
          EXPECT_NEAR(got.at(field).get<double>(), want.at(field).get<double>(), 5e-4) << id;
        }
      }
      if (want.contains("probabilities")) {
        for (const auto& [option, p] : want.at("probabilities").items()) {
          EXPECT_NEAR(got.at("probabilities").at(option).get<double>(), p.get<double>(), 2e-4 + 1e-12) << id;
        }
      }
    }
    ++compared;
  }
  EXPECT_GE(compared, 20);
  EXPECT_GT(resumed, 0) << "no decision resumed from the prompt cache";
}

// The spec's example as curl sends it, byte for byte what the reference rounds to.
TEST_F(SystemOne, TheSpecExampleWithCurl) {
  const std::string path = std::filesystem::temp_directory_path() / ("duet-systemone-" + std::to_string(getpid()));
  std::ofstream(path) << golden("spec-example").at("body").get<std::string>();
  const CommandResult result = run_command("curl -sS --max-time 60 " + server_->url() + "/v1/systemone -d @" + path);
  std::filesystem::remove(path);
  const Json answer = Json::parse(result.output, nullptr, false);
  ASSERT_TRUE(answer.is_object()) << result.output;
  EXPECT_EQ(answer.at("answers"), golden("spec-example").at("answers")) << result.output;
}

TEST_F(SystemOne, RawEnvelopeAndConfidenceFormula) {
  // ordered_json: the questions' order is part of the prompt.
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(golden("spec-example").at("body").get<std::string>());
  body["raw"] = true;
  body["envelope"] = true;
  body["confidence_formula"] = "cloudflare";
  const Reply reply = post(*server_, body.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json.at("success"), true);
  EXPECT_EQ(reply.json.at("errors"), Json::array());
  const Json& team = reply.json.at("result").at("answers").at("team");
  EXPECT_EQ(team.at("logits").size(), 2u);
  const double cloudflare = golden("spec-example").at("confidence").at("team").at("cloudflare");
  EXPECT_NEAR(team.at("confidence").get<double>(), cloudflare, 2e-4);
  const double p = golden("spec-example").at("answers_raw").at("team").at("probabilities").at("billing");
  EXPECT_NEAR(team.at("probabilities").at("billing").get<double>(), p, 1e-4);
  EXPECT_NE(
      team.at("probabilities").at("billing").get<double>(),
      golden("spec-example").at("answers").at("team").at("probabilities").at("billing").get<double>());  // not rounded
}

// A state over the context: refused with 413 by default; with truncation state_head its head is kept and the
// answer says how much was dropped.
TEST_F(SystemOne, LongStatesAreRefusedOrTruncatedOnRequest) {
  std::string state;
  for (int i = 0; i < 400; ++i) state += "ticket " + std::to_string(i) + " was reopened after the refund; ";
  Json body = {{"model", "demo"}, {"state", state}, {"questions", {{"urgent", {{"type", "noul"}}}}}};
  const Reply refused = post(*server_, body.dump());
  EXPECT_EQ(refused.status, 413) << refused.body;
  EXPECT_EQ(refused.json["error"]["code"], "state_too_long");
  EXPECT_EQ(refused.json["error"]["param"], "state");
  body["truncation"] = "state_head";
  const Reply kept = post(*server_, body.dump());
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(kept.json["usage"]["input_tokens"], 1024);
  EXPECT_GT(kept.json["usage"]["state_tokens_dropped"].get<int>(), 1000);
}

TEST_F(SystemOne, RefusalsOverHttp) {
  struct Case {
    std::string body;
    int status;
    const char* code;
  };
  std::string many_questions;
  for (int i = 0; i < 40; ++i)  // 40 questions whose schema alone is over the 1024-token context
    many_questions += fmt::format(R"({}"q{}": {{"type": "choice", "criteria": {{"a": "{}", "b": null}}}})",
                                  i ? "," : "", i, std::string(60, 'x'));
  const Case cases[] = {
      {"{\"model\": ", 400, "invalid_json"},
      {R"({"model": "other", "state": 1, "questions": {"q": {"type": "noul"}}})", 404, "model_not_found"},
      {R"({"model": "demo", "state": 1, "questions": {"q": {"type": "maybe"}}})", 422, "invalid_question_type"},
      {R"({"model": "demo", "state": 1, "questions": {"q": {"type": "noul"}}, "stream": true})", 422, "unknown_field"},
      {R"({"model": "demo", "state": 1, "questions": {)" + many_questions + "}}", 413, "schema_too_long"},
      {"{\"model\": \"demo\", \"state\": \"" + std::string(300000, 'x') + "\"}", 413, "request_too_large"},
  };
  for (const Case& c : cases) {
    const Reply reply = post(*server_, c.body);
    EXPECT_EQ(reply.status, c.status) << c.code << ": " << reply.body.substr(0, 300);
    EXPECT_EQ(reply.json["error"]["code"], c.code) << reply.body.substr(0, 300);
    EXPECT_TRUE(reply.json["error"]["message"].is_string());
  }
  auto get = server_->client().Get("/v1/systemone");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

// instructions of any JSON value: answered as if the client had sent their render() (Python's json.dumps with sorted
// keys, typed in from CPython) as a string, byte for byte; a value Python reads as false as if it had sent none. A
// planted control: another rendering of the same value (1 for 1.0) changes the raw answer.
TEST_F(SystemOne, InstructionsOfAnyJsonValue) {
  const auto ask = [&](const std::string& instructions) {
    const std::string body = R"({"model": "demo", "state": "The build failed twice.", "raw": true, "questions": {)"
                             R"("ship": {"type": "noul")" +
                             (instructions.empty() ? "" : ", \"instructions\": " + instructions) +
                             R"(}, "team": {"type": "choice", "criteria": {"infra": null, "app": "Application"}}}})";
    const Reply reply = post(*server_, body);
    EXPECT_EQ(reply.status, 200) << instructions << ": " << reply.body;
    return without_cached_tokens(reply.body);
  };
  EXPECT_EQ(ask(R"({"b": 1.0, "a": [true, null, "ä"]})"), ask(R"("{\"a\":[true,null,\"ä\"],\"b\":1.0}")"));
  EXPECT_EQ(ask("[1e16, 2]"), ask(R"("[1e+16,2]")"));
  EXPECT_NE(ask(R"({"b": 1.0, "a": [true, null, "ä"]})"), ask(R"("{\"a\":[true,null,\"ä\"],\"b\":1}")"));
  const std::string none = ask("");
  for (const char* falsy : {"false", "0", "[]", "{}", "null", R"("")"}) EXPECT_EQ(ask(falsy), none) << falsy;
  EXPECT_NE(ask("true"), none);
}

// Under the default (hosted) limits, ids beyond [A-Za-z0-9_.-] are refused, and the message names the switch.
TEST_F(SystemOne, HostedLimitsRefuseOtherIdsAndNameTheSwitch) {
  const Reply reply = post(
      *server_,
      R"({"model": "demo", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"ä": null, "Ω": null}}}})");
  EXPECT_EQ(reply.status, 422) << reply.body;
  EXPECT_EQ(reply.json["error"]["code"], "invalid_option_id");
  EXPECT_NE(reply.json["error"]["message"].get<std::string>().find("--decision-limits reference"), std::string::npos);
}

// `duet serve --decision-limits reference`: what the protocol's reference implementation takes and the hosted limits
// refuse is answered; what the spec refuses still is; a request both take gets the same bytes from both servers.
class SystemOneReferenceLimits : public SystemOne {
 protected:
  static void SetUpTestSuite() {
    SystemOne::SetUpTestSuite();
    reference_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--context", "4096", "--max-tokens", "64", "--parallel", "2", "--decision-limits", "reference"});
  }
  static void TearDownTestSuite() {
    reference_.reset();
    SystemOne::TearDownTestSuite();
  }
  void SetUp() override {
    SystemOne::SetUp();
    if (!reference_) FAIL() << "duet serve --decision-limits reference did not start";
  }
  static std::unique_ptr<ServerProcess> reference_;
};
std::unique_ptr<ServerProcess> SystemOneReferenceLimits::reference_;

TEST_F(SystemOneReferenceLimits, IdsOfAnyTextAndCountsFromOne) {
  const Reply ids = post(*reference_, R"({"model": "demo", "state": "Ünïcödé ticket", "questions": {
      "größe Ω": {"type": "choice", "instructions": {"ask": "Which?"},
                  "criteria": {"Ω": "omega", "ä": null, "😀": "grin", "a b": null, "z": "zed"}}}})");
  ASSERT_EQ(ids.status, 200) << ids.body;
  // ordered_json: the probabilities' key order is the client's.
  const auto answer = nlohmann::ordered_json::parse(ids.body).at("answers").at("größe Ω");
  std::vector<std::string> listed;
  double total = 0;
  for (const auto& [id, p] : answer.at("probabilities").items()) {
    listed.push_back(id);
    total += p.get<double>();
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"Ω", "ä", "😀", "a b", "z"}));  // the client's order
  EXPECT_NEAR(total, 1.0, 5 * 5e-5);                                         // five numbers rounded to 4 places
  EXPECT_TRUE(answer.at("probabilities").contains(answer.at("choice").get<std::string>()));

  // One option and one level: certain, under every confidence formula; eleven levels; 65 questions (about 60 tokens
  // each with the demo tokenizer: within the 4096-token context).
  for (const char* formula : {"max_p", "typesafe", "cloudflare"}) {
    const Reply one = post(*reference_, std::string(R"({"model": "demo", "state": "s", "confidence_formula": ")") +
                                            formula + R"(", "questions": {
        "only": {"type": "choice", "criteria": {"sole": null}}, "level": {"type": "score", "criteria": ["just"]}}})");
    ASSERT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(one.json.at("answers").at("only").at("choice"), "sole");
    EXPECT_EQ(one.json.at("answers").at("only").at("confidence"), 1.0) << formula;
    EXPECT_EQ(one.json.at("answers").at("only").at("probabilities").at("sole"), 1.0);
    EXPECT_EQ(one.json.at("answers").at("level").at("score"), 0.0);
    EXPECT_EQ(one.json.at("answers").at("level").at("confidence"), 1.0) << formula;
  }
  const Reply levels = post(*reference_, R"({"model": "demo", "state": "s", "questions": {"n": {"type": "score",
      "criteria": ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]}}})");
  ASSERT_EQ(levels.status, 200) << levels.body;
  EXPECT_EQ(levels.json.at("answers").at("n").at("legend").size(), 11u);
  EXPECT_GE(levels.json.at("answers").at("n").at("score").get<double>(), 0.0);
  EXPECT_LE(levels.json.at("answers").at("n").at("score").get<double>(), 10.0);
  std::string many;
  for (int i = 0; i < 65; ++i)
    many += fmt::format(R"({}"q{}": {{"type": "choice", "criteria": {{"y": null}}}})", i ? "," : "", i);
  const Reply sixty_five = post(*reference_, R"({"model": "demo", "state": "s", "questions": {)" + many + "}}");
  ASSERT_EQ(sixty_five.status, 200) << sixty_five.body.substr(0, 300);
  EXPECT_EQ(sixty_five.json.at("answers").size(), 65u);

  // The same requests under the hosted limits: refused.
  for (const Reply& hosted : {post(*server_, R"({"model": "demo", "state": "s", "questions": {"q": {"type": "choice",
                                  "criteria": {"sole": null}}}})"),
                              post(*server_, R"({"model": "demo", "state": "s", "questions": {)" + many + "}}")}) {
    EXPECT_EQ(hosted.status, 422) << hosted.body.substr(0, 300);
  }
}

TEST_F(SystemOneReferenceLimits, WhatTheSpecRefusesStaysRefused) {
  for (const char* body : {R"({"model": "demo", "state": "s", "questions": {}})",
                           R"({"model": "demo", "state": "s", "questions": {"q": {"type": "choice", "criteria": {}}}})",
                           R"({"model": "demo", "state": "s", "questions": {"q": {"type": "score", "criteria": []}}})",
                           R"({"model": "demo", "state": "s", "questions": {"": {"type": "noul"}}})"}) {
    const Reply reply = post(*reference_, body);
    EXPECT_EQ(reply.status, 422) << body << ": " << reply.body;
  }
}

TEST_F(SystemOneReferenceLimits, ARequestBothTakeGetsTheSameBytes) {
  for (const char* name : {"spec-example", "unicode-state", "order-a"}) {
    const std::string body = golden(name).at("body");
    const Reply hosted = post(*server_, body);
    ASSERT_EQ(hosted.status, 200) << name;
    EXPECT_EQ(without_cached_tokens(post(*reference_, body).body), without_cached_tokens(hosted.body)) << name;
  }
}

// Four decisions at once equal the same decisions one at a time, byte for byte.
TEST_F(SystemOne, FourConcurrentEqualAloneByteForByte) {
  std::vector<std::string> bodies;
  for (const char* name : {"spec-example", "blog-shape", "unicode-state", "order-a"})
    bodies.push_back(golden(name).at("body"));
  std::vector<std::string> alone;
  for (const auto& body : bodies) alone.push_back(without_cached_tokens(post(*server_, body).body));
  std::vector<std::string> together(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] { together[i] = without_cached_tokens(post(*server_, bodies[i]).body); });
  for (auto& thread : threads) thread.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_FALSE(alone[i].empty());
    EXPECT_EQ(together[i], alone[i]) << i;
  }
}

// A KV cache smaller than a decision's prompt: 413, as a prompt over the budget is.
TEST(SystemOneKvCache, APromptOverTheWholeKvCacheIsTooLong) {
  ServerProcess server({"--kv-cache-tokens", "256", "--context", "1024", "--max-tokens", "64"});
  const Reply reply = post(server, golden("spec-example").at("body"));  // 449 tokens
  EXPECT_EQ(reply.status, 413) << reply.body;
  EXPECT_EQ(reply.json["error"]["code"], "context_length_exceeded");
}

// A model folder without the head files: chat as before, decisions refused by name.
TEST(SystemOneWithoutHead, IsRefusedByName) {
  const auto folder = std::filesystem::temp_directory_path() / ("duet-no-head-" + std::to_string(getpid()));
  std::filesystem::remove_all(folder);
  std::filesystem::copy(demo_model_dir(), folder);
  std::filesystem::remove(folder / "joint_head.safetensors");
  std::filesystem::remove(folder / "joint_head_config.json");
  {
    ServerProcess server({}, folder.string());
    auto models = server.client().Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(Json::parse(models->body)["data"][0]["decisions"], false);
    const Reply reply = post(server, golden("spec-example").at("body"));
    EXPECT_EQ(reply.status, 404);
    EXPECT_EQ(reply.json["error"]["code"], "decisions_not_supported");
  }
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace duet::testing
