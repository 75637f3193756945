// The prompt cache's host tier on the CPU backend (the shared checks: prompt_cache_host_runs.h), on the real tiny
// model. tests/cuda/prompt_cache_host_cuda_test.cc runs the same on the GPU.
#include <gtest/gtest.h>

#include "prompt_cache_host_runs.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

class PromptCacheHostTier : public testing::TinyModelTest {};

TEST_F(PromptCacheHostTier, ResumedFromTheHostEqualsFresh) { testing::expect_host_tier_resumes_equal_fresh(*model_); }
TEST_F(PromptCacheHostTier, EvictionFollowsRecentUseAndTheHostBudget) {
  testing::expect_host_tier_eviction_by_recent_use_and_budget(*model_);
}
TEST_F(PromptCacheHostTier, APlantedHashCollisionIsCaughtByTheTokens) {
  testing::expect_host_tier_collision_caught_by_the_tokens(*model_);
}
TEST_F(PromptCacheHostTier, PagesRestoredOutOfOrderFail) { testing::expect_host_pages_out_of_order_to_fail(*model_); }
TEST_F(PromptCacheHostTier, EngineAnswersEqualFreshAndResumeFromTheHost) {
  testing::expect_engine_host_tier_answers_equal_fresh(*model_);
}
TEST_F(PromptCacheHostTier, CancellingASharerOfABroughtBackEntryFreesNothingAnotherReads) {
  testing::expect_cancelling_a_sharer_of_a_brought_back_entry_to_free_nothing(*model_);
}

}  // namespace
}  // namespace duet::engine
