// Forking a sequence on the CUDA backend (CudaStateStorage::copy_slot / copy_pages): a copy taken mid-prompt (inside
// a delta-rule chunk, on a chunk boundary, after one token) computes the original's next rows bit for bit, prefill
// and decode, with a control that differs; and through the engine, n choices sharing one prefill (their first tokens
// drawn on the GPU from the same row, Piece::fork_samples) give the tokens of separate prefills. Skipped without a
// GPU.
#include <gtest/gtest.h>

#include "../engine/engine_harness.h"
#include "../model/fork_runs.h"
#include "../model/golden_fixtures.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/model.h"

namespace duet::model {
namespace {

class CudaFork : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    model_ = Model::load(testing::model_fixture(GetParam()), "cuda");
  }
  std::unique_ptr<Model> model_;
};

TEST_P(CudaFork, TheForkComputesTheOriginalsNextRowsBitForBit) { testing::expect_forks_equal_originals(*model_); }

// The engine on the GPU: the later choices' first tokens are sampled beside the first's (the same row drawn again
// with each choice's settings), then they decode from copied states.
TEST_P(CudaFork, ChoicesSharingAPrefillEqualSeparatePrefills) {
  using engine::Engine, engine::EngineOptions, engine::Request;
  namespace harness = engine::testing;
  auto make = [&](int32_t parallel) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 640;
    o.prefill_chunk = 64;
    o.step_token_budget = 256;
    return std::make_unique<Engine>(*model_, nullptr, o);
  };
  for (bool seeded : {false, true}) {
    std::vector<Request> requests;
    Request request;
    request.prompt = testing::fork_prompt(*model_, 130);
    request.sampling.max_tokens = 10;
    request.sampling.ignore_eos = true;
    request.sampling.temperature = seeded ? 0.9f : 0.0f;
    request.sampling.seed = 5;
    for (uint64_t i = 0; i < 4; ++i) {
      requests.push_back(request);
      requests.back().sampling.seed += i;
    }
    const auto alone = harness::run_each_alone([&] { return make(1); }, requests);
    auto shared = make(4);
    std::vector<harness::Outcome> got;
    for (const auto& handle : shared->submit_choices(requests)) got.push_back(harness::drain(*handle));
    harness::expect_same_tokens(got, alone, seeded ? "seeded" : "greedy");
    EXPECT_EQ(shared->stats().prompt_tokens_total, 130);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFork, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::model
