// The engine survives a bad step: a failure fails only the requests it concerns, each with an error event and its
// slot freed, and the engine goes on. Also the listener a server uses to take events without holding a thread.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/engine.h"
#include "engine_harness.h"
#include "fake_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::FakeModel;
using testing::greedy_request;
using testing::Outcome;
using testing::small_options;

constexpr int32_t kFaultsVocab = 97;
constexpr int32_t kPoison = 66;

// Waits until the engine has run `steps` steps (the healthy request is decoding).
void wait_for_steps(const Engine& engine, int64_t steps) {
  for (int i = 0; i < 2000 && engine.stats().steps_total < steps; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(engine.stats().steps_total, steps);
}

// The poisoned request's piece shares steps with a healthy request's decode rows: the model refuses those steps
// naming the poisoned piece, which fails alone; the healthy request's tokens equal the same request run alone.
TEST(EngineFaults, ARefusedPieceFailsItsRequestAloneAndTheOthersAreExact) {
  const Request healthy = greedy_request({1, 2, 3}, 40);
  std::vector<int32_t> alone_tokens;
  {
    FakeModel model(kFaultsVocab);
    Engine engine(model, nullptr, small_options(2));
    alone_tokens = drain(*engine.submit(healthy)).tokens;
  }
  FakeModel model(kFaultsVocab);
  model.set_poison_token(kPoison);
  model.set_step_delay(std::chrono::milliseconds(2));
  Engine engine(model, nullptr, small_options(2));
  auto healthy_handle = engine.submit(healthy);
  wait_for_steps(engine, 3);
  const Outcome poisoned = drain(*engine.submit(greedy_request({5, kPoison, 7}, 4)));
  EXPECT_EQ(engine.stats().running, 1) << "the healthy request should still run beside the refused steps";
  const Outcome kept = drain(*healthy_handle);

  EXPECT_EQ(poisoned.finished.reason, FinishReason::error);
  EXPECT_NE(poisoned.finished.error.find("poisoned token 66"), std::string::npos) << poisoned.finished.error;
  EXPECT_EQ(kept.finished.reason, FinishReason::length);
  EXPECT_EQ(kept.tokens, alone_tokens);
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.requests_failed, 1);
  EXPECT_EQ(stats.requests_finished, 1);
  EXPECT_EQ(stats.slots_free, 2);
}

// A step that throws something that is not even a std::exception, after its states moved: the requests in that step
// end with an error (their states may be half-written); the request waiting behind them runs normally.
TEST(EngineFaults, AThrowMidStepFailsThatStepsRequestsAndTheWaitingOneRuns) {
  FakeModel model(kFaultsVocab);
  model.set_crash_token(kPoison);
  Engine engine(model, nullptr, small_options(1));
  auto crashing = engine.submit(greedy_request({5, kPoison}, 4));
  auto waiting = engine.submit(greedy_request({1, 2}, 6));
  const Outcome crashed = drain(*crashing);
  const Outcome after = drain(*waiting);
  EXPECT_EQ(crashed.finished.reason, FinishReason::error);
  EXPECT_NE(crashed.finished.error.find("not a std::exception"), std::string::npos) << crashed.finished.error;
  EXPECT_EQ(after.finished.reason, FinishReason::length);
  EXPECT_EQ(after.tokens.size(), 6u);
  EXPECT_EQ(engine.stats().requests_failed, 1);
  EXPECT_EQ(engine.stats().slots_free, 1);
}

// A device error (issue 22): the GPU's state cannot be trusted after it, so the engine ends every request with the
// error, the running one and the one waiting for its slot alike, refuses new ones with EngineFailed, says so in its
// stats, and runs no further step; with steps launched ahead too (step 6 is one: the request decodes alone). The
// control: the same engine without the injected fault finishes both.
TEST(EngineFaults, ADeviceErrorEndsEveryRequestAndStopsTheEngine) {
  for (const auto lookahead : {EngineOptions::Lookahead::never, EngineOptions::Lookahead::always})
    for (const bool inject : {true, false}) {
      SCOPED_TRACE(inject ? "device fault at step 6" : "control: no fault");
      SCOPED_TRACE(lookahead == EngineOptions::Lookahead::always ? "steps launched ahead" : "steps planned after");
      FakeModel model(kFaultsVocab);
      model.set_step_delay(std::chrono::milliseconds(2));
      EngineOptions options = small_options(1);
      options.lookahead = lookahead;
      options.test_device_fault_step = inject ? 6 : 0;
      Engine engine(model, nullptr, options);
      auto running = engine.submit(greedy_request({1, 2, 3}, 20));
      auto waiting = engine.submit(greedy_request({4, 5}, 3));  // one slot: it waits for the first
      const Outcome first = drain(*running), second = drain(*waiting);
      if (!inject) {
        EXPECT_EQ(first.finished.reason, FinishReason::length);
        EXPECT_EQ(second.finished.reason, FinishReason::length);
        EXPECT_TRUE(engine.stats().failure.empty());
        if (lookahead == EngineOptions::Lookahead::always) EXPECT_GT(engine.stats().steps_ahead_total, 5);
        continue;
      }
      for (const Outcome* outcome : {&first, &second}) {
        EXPECT_EQ(outcome->finished.reason, FinishReason::error);
        EXPECT_NE(outcome->finished.error.find("the GPU failed"), std::string::npos) << outcome->finished.error;
        EXPECT_NE(outcome->finished.error.find("DUET_TEST_DEVICE_FAULT_STEP"), std::string::npos);
      }
      EXPECT_LT(first.tokens.size(), 20u);
      EXPECT_TRUE(second.tokens.empty());
      const EngineStats stats = engine.stats();
      EXPECT_NE(stats.failure.find("the GPU failed"), std::string::npos);
      EXPECT_EQ(stats.requests_failed, 2);
      EXPECT_THROW(engine.submit(greedy_request({1}, 2)), EngineFailed);
      const int64_t steps = stats.steps_total;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(engine.stats().steps_total, steps) << "no step runs after a device error";
    }
}

// A server takes events through the listener and try_next, with no thread waiting in next().
TEST(EngineFaults, TheListenerAnnouncesEventsAndNeverRunsAfterItIsCleared) {
  FakeModel model(kFaultsVocab);
  model.set_step_delay(std::chrono::milliseconds(5));  // the listener is set long before the later tokens come
  Engine engine(model, nullptr, small_options(1));
  auto handle = engine.submit(greedy_request({1, 2}, 5));
  std::atomic<int> calls = 0;
  handle->set_listener([&calls] { ++calls; });
  int tokens = 0, finished = 0;
  for (int i = 0; i < 5000 && finished == 0; ++i) {
    while (auto event = handle->try_next()) ++(std::holds_alternative<TokenEvent>(*event) ? tokens : finished);
    if (finished == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(tokens, 5);
  EXPECT_EQ(finished, 1);
  // The announcements come from the notifier's thread after each step (engine/listener_notifier.h), a moment after
  // try_next can already see the step's events: wait for them (a busy CI machine under ASan saw 4 of 5 at once).
  for (int i = 0; i < 2000 && calls.load() < 5; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(calls.load(), 5) << "every event pushed after the listener was set is announced";
  EXPECT_FALSE(handle->try_next()) << "nothing follows the FinishedEvent";

  auto second = engine.submit(greedy_request({3, 4}, 20));
  std::atomic<int> second_calls = 0;
  second->set_listener([&second_calls] { ++second_calls; });
  second->set_listener(nullptr);
  const int after_clear = second_calls.load();
  EXPECT_EQ(drain(*second).finished.reason, FinishReason::length);
  EXPECT_EQ(second_calls.load(), after_clear);
}

}  // namespace
}  // namespace duet::engine
