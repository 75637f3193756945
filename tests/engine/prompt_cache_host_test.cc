// The prompt cache's host tier on the CPU backend (the shared checks: prompt_cache_host_runs.h), on the real tiny
// models, both fixtures the GPU test runs (tests/cuda/prompt_cache_host_cuda_test.cc runs the same on the GPU).
// tiny-mm matters: its one attention layer makes a KV page small against a GDN snapshot, so a host budget that holds
// two snapshots of tiny-text holds one of tiny-mm, the shape the H200 failed on.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "../model/golden_fixtures.h"
#include "model/model.h"
#include "prompt_cache_host_runs.h"

namespace duet::engine {
namespace {

class PromptCacheHostTier : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"tiny-text", "tiny-mm"})
      models_[name] = model::Model::load(duet::testing::model_fixture(name));
  }
  static void TearDownTestSuite() { models_.clear(); }
  model::Model& model() { return *models_.at(GetParam()); }
  static inline std::map<std::string, std::unique_ptr<model::Model>> models_;
};

TEST_P(PromptCacheHostTier, ResumedFromTheHostEqualsFresh) { testing::expect_host_tier_resumes_equal_fresh(model()); }
TEST_P(PromptCacheHostTier, EvictionFollowsRecentUseAndTheHostBudget) {
  testing::expect_host_tier_eviction_by_recent_use_and_budget(model());
}
TEST_P(PromptCacheHostTier, APlantedHashCollisionIsCaughtByTheTokens) {
  testing::expect_host_tier_collision_caught_by_the_tokens(model());
}
TEST_P(PromptCacheHostTier, APageRestoredFromTheWrongHostPageFails) {
  testing::expect_a_page_restored_from_the_wrong_host_page_to_fail(model());
}
TEST_P(PromptCacheHostTier, BringingBackFromAFullHostTierDropsNothing) {
  testing::expect_bringing_back_from_a_full_host_tier_to_drop_nothing(model());
}
TEST_P(PromptCacheHostTier, EngineAnswersEqualFreshAndResumeFromTheHost) {
  testing::expect_engine_host_tier_answers_equal_fresh(model());
}
TEST_P(PromptCacheHostTier, CancellingASharerOfABroughtBackEntryFreesNothingAnotherReads) {
  testing::expect_cancelling_a_sharer_of_a_brought_back_entry_to_free_nothing(model());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptCacheHostTier, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::engine
