// Row invariance through the engine on the real tiny model (tests/fixtures/models/tiny-text, random weights,
// vocab 512): N concurrent requests of mixed prompt lengths give exactly the tokens of the same requests run
// alone and serially, greedy and seeded; plus admission, queue and refusals with the real forward pass.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/piece_runner.h"
#include "engine_harness.h"
#include "model/model.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::greedy_request;
using testing::Outcome;

class RealModel : public testing::TinyModelTest {
 protected:
  static EngineOptions options(int32_t parallel, int32_t chunk = 64) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 640;
    o.prefill_chunk = chunk;
    o.queue_limit = 64;
    o.step_token_budget = 256;
    return o;
  }

  void check_exactness(bool seeded) {
    testing::expect_row_invariance(
        [](int32_t parallel) { return std::make_unique<Engine>(*model_, nullptr, options(parallel)); },
        testing::mixed_requests(16, vocab(), 64, 16, seeded));
  }
};

TEST_F(RealModel, ConcurrentGreedyEqualsAloneAndSerial) { check_exactness(false); }
TEST_F(RealModel, ConcurrentSeededEqualsAloneAndSerial) { check_exactness(true); }

// Cuts at any multiple of 64 give the same rows (the contract the chunked prefill keeps).
TEST_F(RealModel, PrefillChunkSizeDoesNotChangeTokens) {
  const auto requests = testing::mixed_requests(8, vocab(), 64, 12, false, 5);
  Engine by_64(*model_, nullptr, options(4, 64));
  Engine by_256(*model_, nullptr, options(4, 256));
  testing::expect_same_tokens(testing::run_concurrently(by_256, requests), testing::run_concurrently(by_64, requests),
                              "chunk 256 vs 64");
}

// Steps launched ahead (EngineOptions::lookahead): each decode row reads its token from the step before's draw in the
// backend (StepPlan::carried) instead of from the host, and the tokens are those of steps planned after the last
// one's tokens, greedy, seeded and penalized (the carried token joins its slot's penalty counts in the backend:
// CarriedId::counts_slot), the requests concurrently and one at a time.
TEST_F(RealModel, StepsLaunchedAheadEqualStepsPlannedAfter) {
  for (const int kind : {0, 1, 2}) {
    const bool seeded = kind == 1;
    auto requests = testing::mixed_requests(8, vocab(), 64, 14, seeded, 11);
    if (kind == 2)
      for (size_t i = 0; i < requests.size(); ++i) {
        requests[i].sampling.repetition_penalty = 1.4f;
        requests[i].sampling.presence_penalty = i % 2 == 0 ? 1.2f : 0.0f;
        requests[i].sampling.frequency_penalty = i % 2 == 1 ? 0.8f : 0.0f;
      }
    EngineOptions ahead_options = options(4), plain_options = options(4);
    ahead_options.lookahead = EngineOptions::Lookahead::always;
    plain_options.lookahead = EngineOptions::Lookahead::never;
    Engine ahead(*model_, nullptr, ahead_options);
    Engine plain(*model_, nullptr, plain_options);
    testing::expect_same_tokens(testing::run_concurrently(ahead, requests), testing::run_concurrently(plain, requests),
                                "launched ahead, concurrently");
    testing::expect_same_tokens(testing::run_serially(ahead, requests), testing::run_serially(plain, requests),
                                "launched ahead, serially");
    EXPECT_GT(ahead.stats().steps_ahead_total, 50);
    EXPECT_EQ(plain.stats().steps_ahead_total, 0);
  }
}

// A carried piece must name a draw of the step launched just before, with nothing run since: otherwise it is refused
// before anything moves (the row would read whatever the device holds there).
TEST_F(RealModel, ACarriedPieceWithoutItsDrawIsRefused) {
  PieceRunner runner(*model_, 2, 64);
  const int32_t a = runner.open(), b = runner.open();
  const std::vector<int32_t> prompt = {5, 6, 7}, placeholder = {0};
  backend::SampleSpec greedy;
  greedy.temperature = 0;
  const model::Piece carried{.slot = b,
                             .tokens = placeholder,
                             .wants = model::RowOutput::sampled,
                             .role = backend::RowRole::decode,
                             .sample = &greedy,
                             .carried_from = 0};
  EXPECT_THROW(runner.run(carried), model::PieceRefused) << "nothing was launched before";
  // Piece 0 of the last launch asked for logits, not a draw.
  runner.run(model::Piece{.slot = a, .tokens = prompt, .wants = model::RowOutput::last_logits});
  EXPECT_THROW(runner.run(carried), model::PieceRefused) << "the last launch drew nothing";
  // A draw, then a step of other work (a refused step moves nothing, so it does not count).
  runner.run(model::Piece{.slot = a, .tokens = prompt, .wants = model::RowOutput::sampled, .sample = &greedy});
  runner.run(model::Piece{.slot = b, .tokens = prompt, .wants = model::RowOutput::last_logits});
  EXPECT_THROW(runner.run(carried), model::PieceRefused) << "another step ran since the draw";
  // Right after a draw: carried.
  runner.run(model::Piece{.slot = a,
                          .tokens = placeholder,
                          .wants = model::RowOutput::sampled,
                          .role = backend::RowRole::decode,
                          .sample = &greedy});
  EXPECT_NO_THROW(runner.run(carried));
}

TEST_F(RealModel, CancelledRequestFreesItsSlot) {
  Engine engine(*model_, nullptr, options(1));
  auto long_one = engine.submit(greedy_request({1, 2, 3}, 500));
  auto next = engine.submit(greedy_request({4, 5, 6}, 4));
  std::optional<Event> first = long_one->next(std::chrono::seconds(60));
  ASSERT_TRUE(first && std::holds_alternative<TokenEvent>(*first));
  long_one->cancel();
  EXPECT_EQ(drain(*long_one).finished.reason, FinishReason::cancelled);
  const Outcome admitted = drain(*next);
  EXPECT_EQ(admitted.finished.reason, FinishReason::length);
  EXPECT_EQ(admitted.tokens.size(), 4u);
  // And it is the same answer as on a fresh engine: the reused slot was reset.
  Engine fresh(*model_, nullptr, options(1));
  EXPECT_EQ(drain(*fresh.submit(greedy_request({4, 5, 6}, 4))).tokens, admitted.tokens);
}

TEST_F(RealModel, FullQueueRefuses) {
  EngineOptions o = options(1);
  o.queue_limit = 1;
  Engine engine(*model_, nullptr, o);
  auto running = engine.submit(greedy_request({1, 2}, 500));
  auto waiting = engine.submit(greedy_request({1, 2}, 500));
  EXPECT_THROW(engine.submit(greedy_request({3}, 1)), QueueFull);
  running->cancel();
  waiting->cancel();
  EXPECT_EQ(drain(*running).finished_events, 1);
  EXPECT_EQ(drain(*waiting).finished_events, 1);
}

TEST_F(RealModel, ContextOverflowIsRefused) {
  Engine engine(*model_, nullptr, options(1));
  try {
    engine.submit(greedy_request(std::vector<int32_t>(600, 7), 41));
    FAIL() << "accepted a request past the context";
  } catch (const RequestInvalid& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
  try {
    engine.submit(greedy_request({vocab()}, 1));
    FAIL() << "accepted an id outside the vocabulary";
  } catch (const RequestInvalid& e) {
    EXPECT_EQ(e.code(), "invalid_prompt");
  }
}

TEST_F(RealModel, ThirtyTwoConcurrentRequestsAllFinish) {
  Engine engine(*model_, nullptr, options(8));
  const auto requests = testing::mixed_requests(32, vocab(), 64, 8, true, 3);
  const auto outcomes = testing::run_concurrently(engine, requests);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].finished_events, 1) << i;
    EXPECT_EQ(outcomes[i].finished.reason, FinishReason::length) << i;
    EXPECT_EQ(static_cast<int32_t>(outcomes[i].tokens.size()), requests[i].sampling.max_tokens) << i;
  }
  EXPECT_EQ(engine.stats().requests_finished, 32);
}

}  // namespace
}  // namespace duet::engine
