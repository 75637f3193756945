// Large bodies are parsed on workers of their own (connection.cc: 256 KiB or more), so a queue of them holds only
// each other: small requests beside them are answered at once. Against `duet serve` on the demo model, over raw
// loopback sockets.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "raw_http.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kAnswer = std::chrono::seconds(60);

std::string post(const std::string& body) {
  return "POST /tokenize HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Was (issue 24, 2): bodies were parsed on the workers every route runs on; two 1.6 MB bodies held every chat for
// about 15 s. Four large bodies a core (more than the workers, one a core, can start at once) are sent together, then
// small requests: each small one must be answered in a fraction of the time the large queue takes to drain. Were they
// on the same workers, a small request would wait behind the queue, as long as its slowest body.
TEST(HttpLargeBodies, AQueueOfLargeBodiesHoldsOnlyItself) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--max-body-bytes", "8388608", "--context", "256"});
  std::string numbers = "{\"x\": [0";  // a million numbers: about a quarter of a second to parse here
  for (int i = 1; i < 1'000'000; ++i) numbers += ",0";
  const std::string large_request = post(numbers + "]}");
  const unsigned large = 4 * std::clamp(std::thread::hardware_concurrency(), 2u, 16u);

  std::atomic<unsigned> sent = 0;
  std::vector<double> large_seconds(large);
  std::vector<int> large_status(large);
  std::vector<std::thread> senders;
  for (unsigned i = 0; i < large; ++i)
    senders.emplace_back([&, i] {
      RawClient client(server.port());
      const auto start = Clock::now();
      client.send(large_request);
      ++sent;
      large_status[i] = status_of(client.read(kAnswer, "}}"));
      large_seconds[i] = seconds_since(start);
    });
  while (sent < large) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the bodies are read and queued

  double small_slowest = 0;
  for (int i = 0; i < 5; ++i) {
    RawClient client(server.port());
    const auto start = Clock::now();
    client.send(post(R"({"prompt": "Hello"})"));
    EXPECT_EQ(status_of(client.read(kAnswer, "]}")), 200);
    small_slowest = std::max(small_slowest, seconds_since(start));
  }
  for (auto& sender : senders) sender.join();

  // Each large body was read and parsed: the route refused it for its missing prompt.
  EXPECT_EQ(std::count(large_status.begin(), large_status.end(), 400), static_cast<long>(large));
  const double large_slowest = *std::max_element(large_seconds.begin(), large_seconds.end());
  std::printf("%u large bodies: the slowest answered in %.3f s; small requests beside them: the slowest in %.3f s\n",
              large, large_slowest, small_slowest);
  EXPECT_LT(small_slowest, large_slowest / 4) << large << " large bodies took up to " << large_slowest
                                              << " s; a small request beside them took " << small_slowest << " s";
  EXPECT_TRUE(server.alive()) << "log: " << server.log_path();
}

}  // namespace
}  // namespace duet::testing
