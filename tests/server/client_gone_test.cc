// Reproduction 8 of the HTTP hardening issue and its siblings: a client that stops reading a stream, or hangs up on
// a request it waits for, cancels that request and frees its slot at once; no thread or buffer is held for it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "raw_http.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kMaxTokens = 4000;

std::string completion_request(bool stream) {
  Json body = {{"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"stream", stream}};
  if (stream) body["logprobs"] = 20;  // about 800 bytes a token: the client's buffers fill fast
  std::string text = body.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" +
         text;
}

std::string log_of(const ServerProcess& server) {
  std::ifstream in(server.log_path());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// After the abandoned request, the one slot serves the next request.
void expect_slot_free(const ServerProcess& server) {
  EXPECT_EQ(server.wait_for_metric(
                "duet_requests_running", [](double v) { return v == 0; }, seconds(5)),
            0);
  auto next = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3, "ignore_eos": true})",
                                   "application/json");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
}

// Was: a stream nobody reads generated all its tokens and held a worker until a 30 s write timeout.
TEST(ClientGone, AStreamNobodyReadsIsCutAtTheUnsentBoundAndCancelled) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--parallel", "1", "--max-tokens", std::to_string(kMaxTokens), "--max-unsent-bytes", "65536"});
  RawClient reader_gone(server.port(), /*receive_buffer=*/4096);
  reader_gone.send(completion_request(true));
  // The client keeps its connection open and never reads: the server's queue passes the bound.
  auto cancelled = server.wait_for_metric("duet_requests_cancelled_total", [](double v) { return v >= 1; });
  EXPECT_EQ(cancelled, 1) << "log: " << server.log_path();
  // About 150 tokens fill the bound, the kernel's buffers and the client's (800 bytes a token).
  EXPECT_LT(server.metric("duet_generated_tokens_total").value_or(kMaxTokens), kMaxTokens / 4);
  EXPECT_NE(log_of(server).find("--max-unsent-bytes 65536"), std::string::npos)
      << "the stream should be cut by the unsent bound, not by a timeout";
  expect_slot_free(server);
}

// A client waiting for a whole answer that hangs up cancels its request at once, not at max_tokens.
TEST(ClientGone, ANonStreamingClientThatHangsUpCancelsItsRequest) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess server({"--parallel", "1", "--max-tokens", std::to_string(kMaxTokens)});
  {
    RawClient impatient(server.port());
    impatient.send(completion_request(false));
    EXPECT_EQ(server.wait_for_metric(
                  "duet_requests_running", [](double v) { return v == 1; }, seconds(5)),
              1);
  }  // closed
  auto cancelled = server.wait_for_metric(
      "duet_requests_cancelled_total", [](double v) { return v >= 1; }, seconds(2));
  EXPECT_EQ(cancelled, 1);
  EXPECT_LT(server.metric("duet_generated_tokens_total").value_or(kMaxTokens), kMaxTokens);
  expect_slot_free(server);
}

}  // namespace
}  // namespace duet::testing
