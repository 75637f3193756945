// Exactness over HTTP: `duet bench --alone --serial` at 1, 4 and 16 streams, greedy, seeded and penalized, against
// `duet serve` on the demo model: every request's tokens equal the same request alone and serially; and
// `duet bench --decisions`: decisions at once equal the same alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "server_process.h"

namespace duet::testing {
namespace {

TEST(ServeBench, ConcurrentEqualsAloneAndSerial) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--parallel", "16", "--context", "1024", "--max-tokens", "64"});
  auto result = run_command(std::string(DUET_BINARY) + " bench --url " + server.url() +
                            " --levels 1,4,16 --tokens 12 --reps 2 --sampling all --alone --serial 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("exactness: 126 equal, 0 unequal, 0 failed"), std::string::npos) << result.output;
  for (const char* level :
       {"level 1 (greedy)", "level 4 (greedy)", "level 16 (greedy)", "level 16 (seeded)", "level 16 (penalized)"})
    EXPECT_NE(result.output.find(level), std::string::npos) << level;
  EXPECT_TRUE(server.alive());
}

// Speculative decoding over HTTP (`--draft`, docs/mtp.md): every request's ids (their sha256, as `duet bench` prints
// them) at 1, 4 and 16 streams, greedy, seeded and penalized, are those of a server without drafts; /metrics shows that
// drafts were accepted, so the comparison is not vacuous.
TEST(ServeBench, DraftsGiveTheSameIds) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  const auto ids = [](std::vector<std::string> flags, double* accepted) {
    for (const char* flag : {"--parallel", "16", "--context", "1024", "--max-tokens", "64", "--backend", "cpu"})
      flags.push_back(flag);
    ServerProcess server(flags);
    auto result = run_command(std::string(DUET_BINARY) + " bench --url " + server.url() +
                              " --levels 1,4,16 --tokens 24 --reps 1 --sampling all 2>&1");
    EXPECT_EQ(result.status, 0) << result.output;
    if (accepted) *accepted = server.metric("duet_drafts_accepted_total").value_or(-1);
    std::string hashes;  // each request's line without its timing
    for (size_t at = result.output.find("request level="); at != std::string::npos;
         at = result.output.find("request level=", at + 1)) {
      const std::string line = result.output.substr(at, result.output.find('\n', at) - at);
      hashes += line.substr(0, line.find(" ttft_ms=")) + line.substr(line.find(" sha256=")) + "\n";
    }
    return hashes;
  };
  const std::string plain = ids({}, nullptr);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), '\n'), 3 * (1 + 4 + 16)) << plain;
  for (const char* kind : {"mtp", "ngram"}) {
    double accepted = 0;
    EXPECT_EQ(ids({"--draft", kind, "--draft-tokens", "3"}, &accepted), plain) << kind;
    EXPECT_GT(accepted, 0) << kind << ": no draft accepted at position 1";
  }
}

// `duet bench --decisions`: per prompt length, every decision made 4 at once equals the same decision alone, byte for
// byte; a length over the server's context is skipped, not failed.
TEST(ServeBench, DecisionsConcurrentEqualAlone) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--parallel", "4", "--context", "1024", "--max-tokens", "64"});
  auto result = run_command(std::string(DUET_BINARY) + " bench --url " + server.url() +
                            " --decisions --decision-lengths 600,1000,2000 --decision-concurrency 4 --reps 1 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("exactness: 8 equal, 0 unequal, 0 failed"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("length 600 (bucket <=1K"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("length 2000: skipped"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("4 at once p50"), std::string::npos) << result.output;
  // The server's own breakdown (Server-Timing) is read back: a prefill time above zero.
  const size_t at = result.output.find("(server: prefill p50 ");
  ASSERT_NE(at, std::string::npos) << result.output;
  EXPECT_GT(std::stod(result.output.substr(at + 21)), 0.0) << result.output;
}

// A request that cannot succeed makes bench fail: the exit code is the signal CI reads. Its prompt alone fills a
// context of 8 positions (a budget over the context would be fitted, not refused).
TEST(ServeBench, FailuresGiveANonZeroExit) {
  if (!demo_model_available()) FAIL() << demo_model_missing_reason();
  ServerProcess server({"--context", "8"});
  auto result = run_command(std::string(DUET_BINARY) + " bench --url " + server.url() +
                            " --levels 1 --tokens 8 --reps 1 --sampling greedy 2>&1");
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("failed: 1"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace duet::testing
