// The prompt cache's host tier on the CUDA backend (backend/cuda/host_tier.h: pinned host memory, copies on the step
// stream between steps): the checks of tests/engine/prompt_cache_host_runs.h, as the CPU runs them. Entries pushed
// out of a one-snapshot device tier and brought back resume equal to fresh, byte for byte (rows below the engine,
// tokens and logprobs through it, beside decode steps replayed as CUDA graphs); the host tier's LRU and budget; a
// bring_back from a full host tier drops nothing (its swap room); and the planted control (the first page restored
// into every page) must fail. Skipped without a GPU.
#include <gtest/gtest.h>

#include "../engine/prompt_cache_host_runs.h"
#include "../model/golden_fixtures.h"
#include "cuda_test_util.h"
#include "model/model.h"

namespace duet::engine {
namespace {

class CudaPromptCacheHostTier : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    model_ = model::Model::load(duet::testing::model_fixture(GetParam()), "cuda");
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(CudaPromptCacheHostTier, ResumedFromTheHostEqualsFresh) {
  testing::expect_host_tier_resumes_equal_fresh(*model_);
}
TEST_P(CudaPromptCacheHostTier, EvictionFollowsRecentUseAndTheHostBudget) {
  testing::expect_host_tier_eviction_by_recent_use_and_budget(*model_);
}
TEST_P(CudaPromptCacheHostTier, APlantedHashCollisionIsCaughtByTheTokens) {
  testing::expect_host_tier_collision_caught_by_the_tokens(*model_);
}
TEST_P(CudaPromptCacheHostTier, APageRestoredFromTheWrongHostPageFails) {
  testing::expect_a_page_restored_from_the_wrong_host_page_to_fail(*model_);
}
TEST_P(CudaPromptCacheHostTier, BringingBackFromAFullHostTierDropsNothing) {
  testing::expect_bringing_back_from_a_full_host_tier_to_drop_nothing(*model_);
}
TEST_P(CudaPromptCacheHostTier, EngineAnswersEqualFreshAndResumeFromTheHost) {
  testing::expect_engine_host_tier_answers_equal_fresh(*model_);
}
TEST_P(CudaPromptCacheHostTier, CancellingASharerOfABroughtBackEntryFreesNothingAnotherReads) {
  testing::expect_cancelling_a_sharer_of_a_brought_back_entry_to_free_nothing(*model_);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPromptCacheHostTier, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::engine
