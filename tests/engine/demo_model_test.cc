// The engine's text path on the bundled demo model (models/demo: a tiny trained Qwen3.5 and a real byte-level BPE
// tokenizer.json; requests ignore the end of turn, which it writes): streamed text equals a one-shot decode, stop
// strings cut the text where they start, and text and stops come out the same under concurrency.
#include "demo_model.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <span>
#include <thread>

#include "../tests_dir.h"
#include "engine/engine.h"
#include "engine_harness.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

class DemoModel : public testing::DemoModelTest {
 protected:
  static EngineOptions options(int32_t parallel) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 512;
    o.prefill_chunk = 64;
    o.step_token_budget = 192;
    return o;
  }
  static Request request(const std::string& text, int32_t max_tokens) {
    Request r;
    r.prompt = tokenizer_->encode(text);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.sampling.skip_special_tokens = false;
    return r;
  }
  // What the tokenizer makes of the ids it has (a padded model vocabulary may sample ids it has no text for).
  static std::string decode(const std::vector<int32_t>& ids) {
    std::vector<int32_t> known;
    for (int32_t id : ids) {
      if (id < tokenizer_->vocab_size()) known.push_back(id);
    }
    return tokenizer_->decode(known);
  }
};

TEST_F(DemoModel, StreamedTextEqualsOneShotDecode) {
  Engine engine(*model_, tokenizer_, options(2));
  const Outcome outcome = drain(*engine.submit(request("Hello, how are you today?", 48)));
  ASSERT_EQ(outcome.tokens.size(), 48u);
  EXPECT_EQ(outcome.text, decode(outcome.tokens));
}

TEST_F(DemoModel, StopStringEndsTheTextWhereItStarts) {
  Engine engine(*model_, tokenizer_, options(2));
  const Outcome free_run = drain(*engine.submit(request("The weather is", 48)));
  const std::string full = free_run.text;
  ASSERT_GE(full.size(), 12u);
  // Six bytes from the middle of the text: likely spans tokens. Cut at a character boundary.
  size_t start = full.size() / 2;
  while (start > 0 && (static_cast<unsigned char>(full[start]) & 0xC0) == 0x80) --start;
  size_t end = std::min(full.size(), start + 6);
  while (end < full.size() && (static_cast<unsigned char>(full[end]) & 0xC0) == 0x80) ++end;
  const std::string stop = full.substr(start, end - start);

  Request with_stop = request("The weather is", 48);
  with_stop.sampling.stop = {stop};
  const Outcome stopped = drain(*engine.submit(with_stop));
  EXPECT_EQ(stopped.finished.reason, FinishReason::stop);
  EXPECT_EQ(stopped.finished.matched_stop_string, stop);
  EXPECT_EQ(stopped.text, full.substr(0, full.find(stop)));
  EXPECT_LT(stopped.tokens.size(), free_run.tokens.size());
}

TEST_F(DemoModel, TextAndStopsAreTheSameUnderConcurrency) {
  const std::vector<std::string> prompts = {
      "One",   "Two words", "A somewhat longer prompt about the sea and ships", "4", "Numbers: 1 2 3 4 5 6 7 8 9", "Hi",
      "Quiet", "Loud!!"};
  std::vector<Request> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r = request(prompts[i], 32);
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 77 + i;
    if (i % 2 == 0) r.sampling.stop = {"e", "th"};
    requests.push_back(std::move(r));
  }
  const auto alone =
      testing::run_each_alone([] { return std::make_unique<Engine>(*model_, tokenizer_, options(1)); }, requests);
  Engine engine(*model_, tokenizer_, options(8));
  const auto together = testing::run_concurrently(engine, requests);
  testing::expect_same_tokens(together, alone, "parallel 8");
  int stopped_by_string = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i].text, alone[i].text) << i;
    stopped_by_string += together[i].finished.matched_stop_string.has_value();
  }
  EXPECT_GT(stopped_by_string, 0) << "no stop string ever matched: the test does not test them";
}

// A decision's head work runs beside the engine, not in it: while a decision's head is held up (here until the test
// lets it go; on a 9B backbone, seconds of host arithmetic for a long prompt), a chat request is served to its end.
// Run on the engine thread, as it was, the head held every other sequence: the chat request timed out.
class HeldHead final : public DecisionSink {
 public:
  void add_rows(int64_t first, int64_t count, std::span<const float> rows) override {
    rows_seen += count;
    EXPECT_EQ(first, expected_first);
    EXPECT_EQ(rows.size() % static_cast<size_t>(count), 0u);
    expected_first += count;
  }
  std::vector<float> finish() override {
    started = true;
    release.wait_for(std::chrono::seconds(60));
    return {static_cast<float>(rows_seen)};
  }
  std::atomic<bool> started{false};
  std::shared_future<void> release;
  int64_t rows_seen = 0, expected_first = 0;
};

TEST_F(DemoModel, AHeldDecisionHeadDoesNotHoldUpChat) {
  Engine engine(*model_, tokenizer_, options(4));
  std::promise<void> go;
  auto head = std::make_shared<HeldHead>();
  head->release = go.get_future().share();
  Request decide;
  decide.kind = RequestKind::decide;
  decide.prompt =
      request(
          "A state of the world, long enough to take a few chunks of sixty-four positions: " + std::string(300, 'x'), 1)
          .prompt;
  decide.decision = head;
  const size_t prompt_rows = decide.prompt.size();
  auto decision = engine.submit(std::move(decide));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!head->started && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(head->started) << "the decision never reached its head";

  const Outcome chat = drain(*engine.submit(request("Hello there", 16)), std::chrono::seconds(20));
  EXPECT_FALSE(chat.timed_out) << "the chat request waited on the decision's head";
  EXPECT_EQ(chat.tokens.size(), 16u);
  EXPECT_FALSE(decision->next(std::chrono::milliseconds(0)).has_value()) << "the decision ended before its head";

  go.set_value();
  const Outcome decided = drain(*decision, std::chrono::seconds(30));
  ASSERT_FALSE(decided.timed_out);
  EXPECT_EQ(decided.finished.reason, FinishReason::stop);
  EXPECT_EQ(decided.finished.decision_logits, std::vector<float>{static_cast<float>(prompt_rows)});
}

}  // namespace
}  // namespace duet::engine
