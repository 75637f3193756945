// The prompt cache on the CUDA backend (CudaStateStorage::save_snapshot / restore_snapshot, device-to-device copies):
// the checks of tests/engine/prompt_cache_runs.h, a resumed prompt's rows equal to the same prompt computed fresh on
// the GPU, byte for byte, with the one-block-off and hash-collision controls; and through the engine, resumed
// requests give the tokens of an engine without a cache. Skipped without a GPU.
#include <gtest/gtest.h>

#include "../engine/engine_harness.h"
#include "../engine/prompt_cache_runs.h"
#include "../model/golden_fixtures.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/model.h"

namespace duet::engine {
namespace {

class CudaPromptCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    model_ = model::Model::load(duet::testing::model_fixture(GetParam()), "cuda");
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(CudaPromptCache, ResumedEqualsFreshAtSeveralBlockBoundaries) {
  testing::expect_resumed_equals_fresh_at_several_block_boundaries(*model_);
}
TEST_P(CudaPromptCache, ASnapshotRestoredOneBlockOffFails) {
  testing::expect_a_snapshot_one_block_off_to_fail(*model_);
}
TEST_P(CudaPromptCache, APlantedHashCollisionIsCaughtByTheTokens) {
  testing::expect_a_planted_collision_caught_by_the_tokens(*model_);
}

// Through the engine on the GPU (sampling there too): prompts sharing prefixes, seeded, serially and at once.
TEST_P(CudaPromptCache, ResumedRequestsEqualFreshOnes) {
  auto options = [](size_t cache_bytes) {
    EngineOptions o;
    o.parallel = 4;
    o.context = 640;
    o.prefill_chunk = 128;
    o.step_token_budget = 256;
    o.prompt_cache_bytes = cache_bytes;
    return o;
  };
  const std::vector<int32_t> system = testing::prompt_of(150, 1, testing::vocab_of(*model_));
  std::vector<Request> requests;
  for (uint32_t i = 0; i < 6; ++i) {
    Request r = testing::greedy_request(testing::concat(std::span(system).first(i % 2 ? 150 : 100),
                                                        testing::prompt_of(20 + i, 2 + i, testing::vocab_of(*model_))),
                                        12);
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 5 + i;
    requests.push_back(std::move(r));
  }
  Engine fresh(*model_, nullptr, options(0));
  const auto reference = testing::run_serially(fresh, requests);
  Engine cached(*model_, nullptr, options(64u << 20));
  testing::expect_same_tokens(testing::run_serially(cached, requests), reference, "resumed, serially");
  testing::expect_same_tokens(testing::run_concurrently(cached, requests), reference, "resumed, concurrently");
  EXPECT_GT(cached.stats().prompt_cache_hits, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPromptCache, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::engine
