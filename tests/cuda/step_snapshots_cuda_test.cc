// GDN snapshots taken inside a step on the CUDA backend (the conv kernel and the delta-rule walk write them:
// DeviceSnapshot): the checks of tests/engine/step_snapshots_runs.h (bytes equal to a cut step's save_snapshot, rows
// unchanged by the extra stores, resumed rows equal to fresh ones, with the one-block-early controls), and through the
// engine, a 1,000-token prompt in one step whose resumed requests answer as an engine without a cache. The capability
// is on by default on CUDA (DUET_CUDA_STEP_SNAPSHOTS=0 turns it off); these tests set it on for themselves. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "../engine/engine_harness.h"
#include "../engine/step_snapshots_runs.h"
#include "../model/golden_fixtures.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/model.h"

namespace duet::engine {
namespace {

class CudaStepSnapshots : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    setenv("DUET_CUDA_STEP_SNAPSHOTS", "1", 1);  // read by each state storage the backend makes
    model_ = model::Model::load(duet::testing::model_fixture(GetParam()), "cuda");
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(CudaStepSnapshots, InAStepEqualCutOnesByteForByte) {
  testing::expect_snapshots_in_a_step_equal_cut_ones(*model_);
}
TEST_P(CudaStepSnapshots, BadRequestsAreRefusedBeforeAnythingMoves) {
  testing::expect_bad_snapshot_requests_refused(*model_);
}
TEST_P(CudaStepSnapshots, ResumedFromThemEqualsFresh) {
  testing::expect_resumed_from_step_snapshots_equals_fresh(*model_);
}
TEST_P(CudaStepSnapshots, ReleasedReservationsAreFreeAgain) {
  testing::expect_released_reservations_to_be_free(*model_);
}

// Through the engine on the GPU: one step for a 1,000-token prompt (two with cuts), the same cached tokens either way,
// and the tokens and logprobs of an engine without a cache; the planted early snapshots change some answer.
TEST_P(CudaStepSnapshots, TheEngineRunsAThousandTokenPromptInOneStepAndResumesExactly) {
  auto options = [](size_t cache_bytes, bool in_steps, int32_t shift) {
    EngineOptions o;
    o.parallel = 2;
    o.context = 1100;
    o.prefill_chunk = 128;
    o.step_token_budget = 1024;
    o.prompt_cache_bytes = cache_bytes;
    o.prompt_cache_snapshots_in_steps = in_steps;
    o.test_step_snapshot_shift = shift;
    return o;
  };
  const int32_t vocab = testing::vocab_of(*model_);
  const std::vector<int32_t> system = testing::prompt_of(700, 1, vocab);
  std::vector<Request> requests;
  for (uint32_t i = 0; i < 4; ++i) {  // a prompt, the same again, a hinted turn, the turn after it
    Request r = testing::greedy_request(
        testing::concat(system, testing::prompt_of(i < 2 ? 300 : 90, i < 2 ? 3 : 3 + i, vocab)), 4);
    r.sampling.top_logprobs = 0;
    if (i == 2) r.cache_hints = {700};
    requests.push_back(std::move(r));
  }
  Engine fresh(*model_, nullptr, options(0, true, 0));
  const auto want = testing::run_serially(fresh, requests);
  std::vector<int32_t> cached[2];
  for (const bool in_steps : {true, false}) {
    Engine engine(*model_, nullptr, options(64u << 20, in_steps, 0));
    const int64_t before = engine.stats().steps_total;
    const testing::Outcome first = testing::drain(*engine.submit(requests[0]));
    EXPECT_EQ(engine.stats().steps_total - before, in_steps ? 4 : 5) << "prefill steps: 1 in steps, 2 cut; 3 decode";
    const auto got = testing::run_serially(engine, requests);
    testing::expect_same_tokens({first}, {want[0]}, "first");
    testing::expect_same_tokens(got, want, in_steps ? "in steps" : "cut");
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].logprobs, want[i].logprobs) << i;
      cached[in_steps].push_back(got[i].finished.cached_tokens);
    }
  }
  EXPECT_EQ(cached[1], cached[0]);
  EXPECT_EQ(cached[1][1], 960);
  Engine planted(*model_, nullptr, options(64u << 20, true, 64));
  const auto wrong = testing::run_serially(planted, requests);
  int differing = 0;
  for (size_t i = 0; i < wrong.size(); ++i)
    differing += wrong[i].tokens != want[i].tokens || wrong[i].logprobs != want[i].logprobs ? 1 : 0;
  EXPECT_GT(differing, 0) << "resumed from snapshots one block early, and nothing differed";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaStepSnapshots, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::engine
