// GDN snapshots taken inside a step (issue 18; backend::StepSnapshot) on the CPU backend: below the engine, the
// shared checks of step_snapshots_runs.h on the tiny model and the demo model; through the engine, a prompt is no
// longer cut at its cache points (a 1,000-token prompt is one step, was two), yet every request resumes as many
// tokens as with the cuts and answers exactly as an engine without a cache, with and without the cuts (both paths
// stay), chat-style hints included. Planted control: snapshots written one block early make resumed answers differ.
#include <gtest/gtest.h>

#include "demo_model.h"
#include "engine/engine.h"
#include "engine_harness.h"
#include "step_snapshots_runs.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

class StepSnapshotRows : public testing::TinyModelTest {};

TEST_F(StepSnapshotRows, InAStepEqualCutOnesByteForByte) {
  testing::expect_snapshots_in_a_step_equal_cut_ones(*model_);
}
TEST_F(StepSnapshotRows, BadRequestsAreRefusedBeforeAnythingMoves) {
  testing::expect_bad_snapshot_requests_refused(*model_);
}
TEST_F(StepSnapshotRows, ResumedFromThemEqualsFresh) {
  testing::expect_resumed_from_step_snapshots_equals_fresh(*model_);
}
TEST_F(StepSnapshotRows, ReleasedReservationsAreFreeAgain) {
  testing::expect_released_reservations_to_be_free(*model_);
}

class StepSnapshotDemoRows : public testing::DemoModelTest {};
TEST_F(StepSnapshotDemoRows, InAStepEqualCutOnesByteForByte) {
  testing::expect_snapshots_in_a_step_equal_cut_ones(*model_);
}

// Engine options: the cache on or off, snapshots in steps or cuts, a budget that takes a 1,000-token prompt whole.
EngineOptions options(size_t cache_bytes, bool in_steps, int32_t shift = 0) {
  EngineOptions o;
  o.parallel = 2;
  o.context = 1100;
  o.prefill_chunk = 128;
  o.step_token_budget = 1024;
  o.queue_limit = 64;
  o.prompt_cache_bytes = cache_bytes;
  o.prompt_cache_snapshots_in_steps = in_steps;
  o.test_step_snapshot_shift = shift;
  return o;
}
constexpr size_t kRoomy = 64u << 20;

std::vector<int32_t> ids(size_t length, uint32_t seed, int32_t vocab) {
  return testing::prompt_of(length, seed, vocab);
}

Request request_of(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r = testing::greedy_request(std::move(prompt), max_tokens);
  r.sampling.top_logprobs = 0;  // the sampled tokens' logprobs: a state one bit off shows there
  return r;
}

// Runs `request` and returns the outcome and the steps it took.
std::pair<Outcome, int64_t> run_counted(Engine& engine, const Request& request) {
  const int64_t before = engine.stats().steps_total;
  Outcome out = drain(*engine.submit(request));
  return {out, engine.stats().steps_total - before};
}

void expect_same_answers(const std::vector<Outcome>& got, const std::vector<Outcome>& want, const std::string& what) {
  testing::expect_same_tokens(got, want, what);
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << what << ": request " << i;
}

// The requests of a conversation-like workload: a long shared beginning, turns after it, repeats, a chat hint.
std::vector<Request> sharing_requests(int32_t vocab) {
  const std::vector<int32_t> system = ids(700, 1, vocab), other = ids(300, 2, vocab);
  std::vector<Request> out;
  auto add = [&](std::vector<int32_t> prompt, std::vector<int32_t> hints = {}) {
    Request r = request_of(std::move(prompt), 6);
    r.cache_hints = std::move(hints);
    out.push_back(std::move(r));
  };
  add(testing::concat(system, ids(300, 3, vocab)));
  add(testing::concat(system, ids(300, 3, vocab)));  // the same again
  add(testing::concat(system, ids(45, 4, vocab)), {700});
  add(testing::concat(system, ids(90, 5, vocab)));  // parts from the last at the hint
  add(testing::concat(std::span(system).first(400), ids(9, 6, vocab)));
  add(other);
  add(testing::concat(other, ids(3, 7, vocab)));
  return out;
}

class StepSnapshotEngine : public testing::TinyModelTest {};

// A 1,000-token prompt: one step with snapshots in steps, two with cuts (960 + 40), one without a cache; sent again,
// it resumes 960 tokens either way and answers as the engine without a cache.
TEST_F(StepSnapshotEngine, AThousandTokenPromptIsOneStep) {
  const Request request = request_of(ids(1000, 9, vocab()), 1);
  Engine fresh(*model_, nullptr, options(0, true));
  const auto [want, fresh_steps] = run_counted(fresh, request);
  EXPECT_EQ(fresh_steps, 1);
  for (const bool in_steps : {true, false}) {
    Engine cached(*model_, nullptr, options(kRoomy, in_steps));
    const auto [first, first_steps] = run_counted(cached, request);
    EXPECT_EQ(first_steps, in_steps ? 1 : 2) << (in_steps ? "snapshots in the step" : "cut at 960");
    const auto [again, again_steps] = run_counted(cached, request);
    EXPECT_EQ(again.finished.cached_tokens, 960);
    EXPECT_EQ(again_steps, 1);
    expect_same_answers({first, again}, {want, want}, in_steps ? "in steps" : "cut");
  }
}

// The workload served one request at a time and all at once: the same answers as without a cache, and the same
// cached tokens per request with snapshots in steps as with cuts.
TEST_F(StepSnapshotEngine, ResumesAsMuchAsTheCutsAndAnswersAsFresh) {
  const std::vector<Request> requests = sharing_requests(vocab());
  Engine fresh(*model_, nullptr, options(0, true));
  const std::vector<Outcome> want = testing::run_serially(fresh, requests);
  std::vector<int32_t> cached_tokens[2];
  int64_t steps[2] = {};
  for (const bool in_steps : {true, false}) {
    Engine cached(*model_, nullptr, options(kRoomy, in_steps));
    const std::vector<Outcome> got = testing::run_serially(cached, requests);
    steps[in_steps] = cached.stats().steps_total;
    expect_same_answers(got, want, in_steps ? "in steps, serially" : "cut, serially");
    for (const Outcome& o : got) cached_tokens[in_steps].push_back(o.finished.cached_tokens);
    expect_same_answers(testing::run_concurrently(cached, requests), want,
                        in_steps ? "in steps, at once" : "cut, at once");
  }
  EXPECT_EQ(cached_tokens[1], cached_tokens[0]);
  EXPECT_GT(cached_tokens[1][1], 0) << "the repeated prompt resumed";
  EXPECT_EQ(cached_tokens[1][3], 640) << "the hint's block end";
  EXPECT_LT(steps[1], steps[0]) << "fewer steps without the cuts";
}

// The control: snapshots written one block before the block end they are kept for. The engine serves from them, and
// the resumed answers must differ from fresh ones somewhere (tokens or logprobs).
TEST_F(StepSnapshotEngine, SnapshotsOneBlockEarlyChangeResumedAnswers) {
  const std::vector<Request> requests = sharing_requests(vocab());
  Engine fresh(*model_, nullptr, options(0, true));
  const std::vector<Outcome> want = testing::run_serially(fresh, requests);
  Engine planted(*model_, nullptr, options(kRoomy, true, /*shift=*/64));
  const std::vector<Outcome> got = testing::run_serially(planted, requests);
  int differing = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differing += got[i].tokens != want[i].tokens || got[i].logprobs != want[i].logprobs ? 1 : 0;
  EXPECT_GT(differing, 0) << "a resumed prompt from the wrong state went unnoticed";
}

// The demo model: a 1,000-token prompt in one step, and sent again resumed to the same answer.
class StepSnapshotDemo : public testing::DemoModelTest {};
TEST_F(StepSnapshotDemo, AThousandTokenPromptIsOneStepAndResumesExactly) {
  const Request request = request_of(ids(1000, 10, static_cast<int32_t>(model_->config().vocab_size)), 2);
  Engine fresh(*model_, nullptr, options(0, true));
  const auto [want, fresh_steps] = run_counted(fresh, request);
  Engine cached(*model_, nullptr, options(kRoomy, true));
  const auto [first, first_steps] = run_counted(cached, request);
  EXPECT_EQ(first_steps, 2) << "one prefill step, one decode step";
  const auto [again, again_steps] = run_counted(cached, request);
  EXPECT_EQ(again.finished.cached_tokens, 960);
  expect_same_answers({first, again}, {want, want}, "demo");
}

}  // namespace
}  // namespace duet::engine
