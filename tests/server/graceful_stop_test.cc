// Reproduction 7 of the HTTP hardening issue: SIGTERM stops accepting, answers new requests 503, lets running
// requests finish for --shutdown-grace seconds, then ends streams with finish_reason `cancelled` and `[DONE]` and
// exits, slow clients or not; a second signal exits at once.
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <thread>

#include "raw_http.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string stream_request(int max_tokens) {
  std::string body =
      Json{{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}}.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

// The finish_reason of a stream's last choice, when the stream ended with [DONE].
std::string finish_of(const std::string& stream) {
  if (stream.find("data: [DONE]") == std::string::npos) return "no [DONE]";
  size_t at = stream.rfind("\"finish_reason\":\"");
  if (at == std::string::npos) return "no finish_reason";
  at += 17;
  return stream.substr(at, stream.find('"', at) - at);
}

// Sends a long stream's request and waits for its first event, so the request runs when the signal comes.
std::unique_ptr<RawClient> running_stream(const ServerProcess& server, int max_tokens, int receive_buffer = 0) {
  auto client = std::make_unique<RawClient>(server.port(), receive_buffer);
  client->send(stream_request(max_tokens));
  EXPECT_NE(client->read(seconds(10), "data: ").find("data: "), std::string::npos);
  return client;
}

TEST(GracefulStop, RunningRequestsFinishNewOnesGet503AndTheProcessExits) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  // A grace far longer than the stream needs, even in a sanitizer build: the process leaves as soon as it is answered.
  ServerProcess server({"--shutdown-grace", "120", "--max-tokens", "3500"});
  auto stream = running_stream(server, 3500);  // 16 s of tokens on the demo model on a loaded 2-core machine
  RawClient late(server.port());
  late.send("GET /health HTTP/1.1\r\nHost: a\r\n");  // its header is finished only after the signal
  std::this_thread::sleep_for(milliseconds(100));
  server.send_signal(SIGTERM);
  std::this_thread::sleep_for(milliseconds(200));
  late.send("\r\n");
  std::string refused = late.read(seconds(5), "}");
  EXPECT_EQ(status_of(refused), 503) << refused;
  EXPECT_NE(refused.find("server_shutting_down"), std::string::npos) << refused;
  RawClient newcomer(server.port());
  EXPECT_FALSE(newcomer.connected() && newcomer.send("GET /health HTTP/1.1\r\nHost: a\r\n\r\n") &&
               status_of(newcomer.read(seconds(2), "}")) == 200)
      << "a new connection after the signal should not be served";

  std::string rest = stream->read(seconds(60), "data: [DONE]");
  EXPECT_EQ(finish_of(rest), "length") << "a request running at the signal should finish within the grace period";
  EXPECT_EQ(server.wait_exit(seconds(10)), 0) << "the process should exit once its last request is answered";
}

TEST(GracefulStop, AfterTheGraceStreamsEndCancelledWithDoneEvenWithAClientThatDoesNotRead) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--shutdown-grace", "0", "--max-tokens", "4000", "--parallel", "4"});
  auto reading = running_stream(server, 4000);
  auto not_reading = running_stream(server, 4000, /*receive_buffer=*/4096);
  const auto signalled = std::chrono::steady_clock::now();
  server.send_signal(SIGTERM);
  std::string rest = reading->read(seconds(10), "data: [DONE]");
  EXPECT_EQ(finish_of(rest), "cancelled") << rest.substr(rest.size() > 600 ? rest.size() - 600 : 0);
  // The client that does not read cannot take its last bytes: the process still exits, a few seconds on.
  EXPECT_EQ(server.wait_exit(seconds(15)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, seconds(12));
}

TEST(GracefulStop, ASecondSignalExitsAtOnce) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--shutdown-grace", "30", "--max-tokens", "4000"});
  auto stream = running_stream(server, 4000);
  server.send_signal(SIGTERM);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(server.alive()) << "the first signal waits for the running stream";
  server.send_signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(seconds(2)), 128 + SIGTERM);
}

// A device error is fatal (issue 22): injected at engine step 1500 (DUET_TEST_DEVICE_FAULT_STEP, test-only) while one
// stream runs and one request waits for the only slot. The stream ends with an error event naming the GPU, the
// waiting request gets a 500 naming it, a new request gets 503 engine_failed, /health answers 503 `failed` with the
// error and /metrics says so; after --shutdown-grace the process exits with status 1. The control: without the
// fault the same two requests finish.
TEST(DeviceFault, IsFatalAndVisibleAndTheProcessExitsNonZero) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  for (const bool inject : {true, false}) {
    SCOPED_TRACE(inject ? "fault injected" : "control");
    if (inject) setenv("DUET_TEST_DEVICE_FAULT_STEP", "1500", 1);
    ServerProcess server({"--parallel", "1", "--shutdown-grace", "2", "--max-tokens", "3500"});
    unsetenv("DUET_TEST_DEVICE_FAULT_STEP");
    auto stream = running_stream(server, inject ? 3500 : 40);
    RawClient waiting(server.port());
    const std::string body = Json{{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}}.dump();
    waiting.send("POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) +
                 "\r\n\r\n" + body);
    const std::string streamed = stream->read(seconds(60), "data: [DONE]");
    const std::string answer = waiting.read(seconds(60), "}");
    if (!inject) {
      EXPECT_EQ(finish_of(streamed), "length") << streamed.substr(streamed.size() > 600 ? streamed.size() - 600 : 0);
      EXPECT_EQ(status_of(answer), 200) << answer;
      EXPECT_TRUE(server.alive());
      continue;
    }
    EXPECT_NE(streamed.find("the GPU failed"), std::string::npos)
        << streamed.substr(streamed.size() > 600 ? streamed.size() - 600 : 0);
    EXPECT_EQ(status_of(answer), 500) << answer;
    EXPECT_NE(answer.find("the GPU failed"), std::string::npos) << answer;
    RawClient health(server.port());
    health.send("GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
    const std::string probed = health.read(seconds(5), "}");
    EXPECT_EQ(status_of(probed), 503) << probed;
    EXPECT_NE(probed.find("\"status\":\"failed\""), std::string::npos) << probed;
    EXPECT_NE(probed.find("DUET_TEST_DEVICE_FAULT_STEP"), std::string::npos) << probed;
    EXPECT_EQ(server.metric("duet_engine_failed"), 1.0);
    RawClient late(server.port());
    late.send("POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) +
              "\r\n\r\n" + body);
    const std::string refused = late.read(seconds(5), "}");
    EXPECT_EQ(status_of(refused), 503) << refused;
    EXPECT_NE(refused.find("engine_failed"), std::string::npos) << refused;
    EXPECT_EQ(server.wait_exit(seconds(30)), 1) << "log: " << server.log_path();
  }
}

}  // namespace
}  // namespace duet::testing
