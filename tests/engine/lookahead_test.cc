// Steps launched ahead (EngineOptions::lookahead, issue 16 item 5) over the fake model: the engine launches step N + 1
// of the same decode rows before it reads step N's tokens, each row reading its token from N's draw where it was
// made (model::Piece::carried_from; the fake resolves them from its last launch, as a GPU reads them on the device).
// What a request sees must not change: the same tokens, texts, stops and counts as with every step planned after the
// last one's tokens, and a row launched for a sequence that the step before ended is never read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "engine/engine.h"
#include "engine_harness.h"
#include "fake_model.h"
#include "fake_tokenizer.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::FakeModel;
using testing::FakeTokenizer;
using testing::greedy_request;
using testing::Outcome;

constexpr int32_t kAheadVocab = 97;

EngineOptions ahead_options(int32_t parallel, EngineOptions::Lookahead lookahead) {
  EngineOptions o = testing::small_options(parallel);
  o.lookahead = lookahead;
  return o;
}

// Mixed requests, greedy and seeded, some of which end early by a stop token or a stop string taken from a free run of
// the same request, so that steps launched ahead hold rows of sequences that have just ended.
std::vector<Request> requests_with_stops(FakeModel& model, FakeTokenizer& tokenizer) {
  std::vector<Request> requests = testing::mixed_requests(12, kAheadVocab, testing::kSmallChunk, 20, false);
  const std::vector<Request> seeded = testing::mixed_requests(12, kAheadVocab, testing::kSmallChunk, 20, true, 7);
  requests.insert(requests.end(), seeded.begin(), seeded.end());
  Engine probe(model, &tokenizer, ahead_options(1, EngineOptions::Lookahead::never));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i % 3 == 0) continue;  // a third run to their length
    const Outcome free_run = drain(*probe.submit(requests[i]));
    const size_t at = 2 + i % 7;
    if (free_run.tokens.size() <= at) continue;
    if (i % 3 == 1) {
      requests[i].sampling.stop_token_ids = {free_run.tokens[at]};
    } else {
      requests[i].sampling.stop = {FakeTokenizer::piece(free_run.tokens[at])};
    }
  }
  return requests;
}

void expect_same_outcomes(const std::vector<Outcome>& got, const std::vector<Outcome>& expected) {
  testing::expect_same_tokens(got, expected, "launched ahead against planned after");
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    EXPECT_EQ(got[i].text, expected[i].text) << "request " << i;
    EXPECT_EQ(got[i].finished.completion_tokens, expected[i].finished.completion_tokens) << "request " << i;
    EXPECT_EQ(got[i].finished.matched_stop_token, expected[i].finished.matched_stop_token) << "request " << i;
    EXPECT_EQ(got[i].finished.matched_stop_string, expected[i].finished.matched_stop_string) << "request " << i;
  }
}

TEST(Lookahead, StepsLaunchedAheadGiveTheSameTokensTextsAndStops) {
  FakeModel model(kAheadVocab);
  FakeTokenizer tokenizer(kAheadVocab);
  const std::vector<Request> requests = requests_with_stops(model, tokenizer);
  int stops = 0;
  for (const Request& r : requests) stops += !r.sampling.stop_token_ids.empty() || !r.sampling.stop.empty();
  ASSERT_GE(stops, 10);

  for (int32_t parallel : {1, 4, 24}) {
    SCOPED_TRACE("parallel " + std::to_string(parallel));
    FakeModel plain_model(kAheadVocab), ahead_model(kAheadVocab);
    Engine plain(plain_model, &tokenizer, ahead_options(parallel, EngineOptions::Lookahead::never));
    Engine ahead(ahead_model, &tokenizer, ahead_options(parallel, EngineOptions::Lookahead::always));
    const std::vector<Outcome> expected = testing::run_concurrently(plain, requests);
    const std::vector<Outcome> got = testing::run_concurrently(ahead, requests);
    expect_same_outcomes(got, expected);
    // Serially too: each request alone in the engine, every one of its decode steps after the first launched ahead.
    expect_same_outcomes(testing::run_serially(ahead, requests), testing::run_serially(plain, requests));
    EXPECT_EQ(plain_model.carried_rows(), 0);
    EXPECT_EQ(plain.stats().steps_ahead_total, 0);
    EXPECT_GT(ahead_model.carried_rows(), 100);
    EXPECT_GT(ahead.stats().steps_ahead_total, 20);
  }
}

// The planted control: a fake whose carried rows read the draw of the wrong piece must make the comparison above fail,
// so the test can tell a step that reads its tokens from the device wrongly.
TEST(Lookahead, AStepThatCarriesTheWrongDrawIsCaught) {
  FakeModel model(kAheadVocab);
  FakeTokenizer tokenizer(kAheadVocab);
  const std::vector<Request> requests = testing::mixed_requests(6, kAheadVocab, testing::kSmallChunk, 12, false);
  FakeModel plain_model(kAheadVocab), broken_model(kAheadVocab);
  broken_model.set_test_carry_shift(1);
  Engine plain(plain_model, &tokenizer, ahead_options(6, EngineOptions::Lookahead::never));
  Engine broken(broken_model, &tokenizer, ahead_options(6, EngineOptions::Lookahead::always));
  const std::vector<Outcome> expected = testing::run_concurrently(plain, requests);
  const std::vector<Outcome> got = testing::run_concurrently(broken, requests);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i].tokens != expected[i].tokens;
  EXPECT_GT(differ, 0u) << "carrying the neighbour's draw went unnoticed";
}

// A row launched ahead for a sequence that the step before ended is never read, and its slot goes to the next request
// reset: one slot, a request that stops early, then another that must equal itself on a fresh engine.
TEST(Lookahead, ARowLaunchedForAnEndedSequenceIsDroppedAndItsSlotReset) {
  FakeModel model(kAheadVocab);
  Engine probe(model, nullptr, ahead_options(1, EngineOptions::Lookahead::never));
  const Outcome free_run = drain(*probe.submit(greedy_request({10, 11}, 12)));
  ASSERT_EQ(free_run.tokens.size(), 12u);
  Request stop = greedy_request({10, 11}, 12);
  stop.sampling.stop_token_ids = {free_run.tokens[4]};

  FakeModel ahead_model(kAheadVocab);
  Engine engine(ahead_model, nullptr, ahead_options(1, EngineOptions::Lookahead::always));
  const Outcome stopped = drain(*engine.submit(stop));
  const Outcome next = drain(*engine.submit(greedy_request({3, 4, 5}, 6)));
  EXPECT_EQ(stopped.finished.reason, FinishReason::stop);
  EXPECT_EQ(stopped.tokens, drain(*probe.submit(stop)).tokens);
  EXPECT_EQ(next.tokens, drain(*probe.submit(greedy_request({3, 4, 5}, 6))).tokens);
  EXPECT_GT(ahead_model.carried_rows(), 0);
  // The stopped request's wasted row ran (the fake checks every piece's position against its slot), and was not sent.
  EXPECT_EQ(stopped.finished.completion_tokens, static_cast<int32_t>(stopped.tokens.size()) + 1);
}

// Penalized sequences launched ahead: each carried token joins its slot's counts where it was drawn (the fake adds it
// as the backends do), and the engine does not send it again, so every draw reads the counts it would have read with
// every step planned after the last one's tokens: each token counted once, none missing. Repetition, presence and
// frequency penalties, greedy and seeded, some requests ended early by stops, concurrently (steps launched ahead and
// steps planned after mixed, as prompts arrive) and serially. The control: a fake that leaves the carried tokens out
// of the counts gives other tokens.
TEST(Lookahead, PenalizedRowsCountTheirCarriedTokensOnce) {
  FakeModel model(kAheadVocab);
  FakeTokenizer tokenizer(kAheadVocab);
  std::vector<Request> requests = requests_with_stops(model, tokenizer);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling.repetition_penalty = i % 3 == 0 ? 1.6f : 1.0f;
    requests[i].sampling.presence_penalty = i % 3 == 1 ? 1.5f : 0.0f;
    requests[i].sampling.frequency_penalty = i % 3 != 1 ? 0.9f : 0.0f;
  }
  std::vector<Outcome> expected_concurrent, expected_serial;
  {
    Engine planned(model, &tokenizer, ahead_options(4, EngineOptions::Lookahead::never));
    expected_concurrent = testing::run_concurrently(planned, requests);
    expected_serial = testing::run_serially(planned, requests);
  }
  const int64_t carried_before = model.carried_rows();
  Engine ahead(model, &tokenizer, ahead_options(4, EngineOptions::Lookahead::always));
  expect_same_outcomes(testing::run_concurrently(ahead, requests), expected_concurrent);
  expect_same_outcomes(testing::run_serially(ahead, requests), expected_serial);
  EXPECT_GT(model.carried_rows() - carried_before, 100);
  EXPECT_GT(ahead.stats().steps_ahead_total, 20);

  model.set_test_uncounted_carries(true);
  Engine uncounted(model, &tokenizer, ahead_options(4, EngineOptions::Lookahead::always));
  const std::vector<Outcome> broken = testing::run_serially(uncounted, requests);
  size_t differing = 0;
  for (size_t i = 0; i < broken.size(); ++i) differing += broken[i].tokens != expected_serial[i].tokens ? 1 : 0;
  EXPECT_GT(differing, requests.size() / 2) << "the control: carried tokens left out of the counts must show";
}

// Nothing is launched ahead where a step's next one could differ from its decode rows: while a prompt waits or
// prefills.
TEST(Lookahead, OnlyPlainDecodeStepsAreLaunchedAhead) {
  FakeModel model(kAheadVocab);
  Engine engine(model, nullptr, ahead_options(2, EngineOptions::Lookahead::always));

  // A long prompt beside a decoding one: no step is launched ahead until the prompt has been read.
  model.set_step_delay(std::chrono::milliseconds(2));
  auto decoding = engine.submit(greedy_request({4, 5}, 40));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<int32_t> long_prompt(300, 7);
  auto prompt = engine.submit(greedy_request(long_prompt, 3));
  const Outcome a = drain(*decoding), b = drain(*prompt);
  EXPECT_EQ(a.tokens.size(), 40u);
  EXPECT_EQ(b.tokens.size(), 3u);
  // A step of carried rows only ever follows a step of decode rows alone.
  const auto steps = model.steps();
  int64_t carried_steps = 0;
  for (size_t k = 1; k < steps.size(); ++k) {
    const bool carries = std::any_of(steps[k].begin(), steps[k].end(), [](const auto& p) { return p.carried; });
    if (!carries) continue;
    ++carried_steps;
    for (const auto& piece : steps[k - 1]) EXPECT_EQ(piece.length, 1) << "step " << k << " follows a prompt's step";
  }
  EXPECT_GT(carried_steps, 0);
  EXPECT_GT(engine.stats().steps_ahead_total, 0);
}

// Cancelling while a step of its sequence runs ahead: the request ends cancelled, the others go on unchanged.
TEST(Lookahead, CancelWhileAStepRunsAhead) {
  FakeModel model(kAheadVocab);
  model.set_step_delay(std::chrono::milliseconds(1));
  Engine engine(model, nullptr, ahead_options(3, EngineOptions::Lookahead::always));
  FakeModel plain_model(kAheadVocab);
  Engine plain(plain_model, nullptr, ahead_options(3, EngineOptions::Lookahead::never));
  auto keep = engine.submit(greedy_request({9, 8}, 60));
  auto cancel = engine.submit(greedy_request({7, 6}, 400));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cancel->next(std::chrono::seconds(10)));
  cancel->cancel();
  EXPECT_EQ(drain(*cancel).finished.reason, FinishReason::cancelled);
  EXPECT_EQ(drain(*keep).tokens, drain(*plain.submit(greedy_request({9, 8}, 60))).tokens);
  EXPECT_GT(engine.stats().steps_ahead_total, 0);
}

// The default (automatic): steps are launched ahead where the model's steps overlap the host (a GPU backend) and
// nowhere else (the CPU backend runs a step inside launch, so there is nothing to overlap).
TEST(Lookahead, AutomaticLaunchesAheadWhereStepsOverlap) {
  if (std::getenv("DUET_LOOKAHEAD") != nullptr) GTEST_SKIP() << "DUET_LOOKAHEAD is set: it overrides the default";
  for (bool overlaps : {true, false}) {
    SCOPED_TRACE(overlaps ? "steps overlap" : "steps do not overlap");
    FakeModel model(kAheadVocab);
    model.set_overlaps_steps(overlaps);
    Engine engine(model, nullptr, ahead_options(2, EngineOptions::Lookahead::automatic));
    EXPECT_EQ(drain(*engine.submit(greedy_request({4, 5}, 30))).tokens.size(), 30u);
    if (overlaps) {
      EXPECT_GT(engine.stats().steps_ahead_total, 20);
    } else {
      EXPECT_EQ(engine.stats().steps_ahead_total, 0);
    }
  }
}

}  // namespace
}  // namespace duet::engine
