// The prompt cache below the engine on the CPU backend (the shared checks: prompt_cache_runs.h), on the real tiny
// model. tests/cuda/prompt_cache_cuda_test.cc runs the same on the GPU.
#include <gtest/gtest.h>

#include "prompt_cache_runs.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

class PromptCacheRows : public testing::TinyModelTest {};

TEST_F(PromptCacheRows, ResumedEqualsFreshAtSeveralBlockBoundaries) {
  testing::expect_resumed_equals_fresh_at_several_block_boundaries(*model_);
}
TEST_F(PromptCacheRows, ASnapshotRestoredOneBlockOffFails) {
  testing::expect_a_snapshot_one_block_off_to_fail(*model_);
}
TEST_F(PromptCacheRows, APlantedHashCollisionIsCaughtByTheTokens) {
  testing::expect_a_planted_collision_caught_by_the_tokens(*model_);
}
TEST_F(PromptCacheRows, EvictionFollowsRecentUseAndThePageBudget) {
  testing::expect_eviction_by_recent_use_and_page_budget(*model_);
}

}  // namespace
}  // namespace duet::engine
