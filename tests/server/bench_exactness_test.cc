// Exactness over HTTP: `duet bench --alone --serial` at 1, 4 and 16 streams, greedy, seeded and penalized, against
// `duet serve` on the demo model: every request's tokens equal the same request alone and serially; and
// `duet bench --decisions`: decisions at once equal the same alone.
#include <gtest/gtest.h>

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
