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

// A decision's entries (issue 18 item 4): found by a decision's lookup only once the sink's prefix is set and within
// the lookup's limit (before the decision's first span), kept within their own byte budget, least recently used first.
struct KeptRows final : DecisionPrefix {
  explicit KeptRows(int64_t n) : n(n) {}
  int64_t positions() const override { return n; }
  int64_t n;
};

TEST_F(PromptCacheRows, DecisionPrefixesOnlyOnceSetWithinTheLimitAndTheirBudget) {
  PieceRunner runner(*model_, 2, 512, 0, /*snapshots=*/4);
  PromptCache cache(runner.blocks(), runner.storage(), 4, 64, PromptCache::default_block_hash,
                    /*max_decision_bytes=*/1000);
  const uint64_t salt = uint64_t{1} << 32;
  const std::vector<int32_t> state = testing::prompt_of(192, 21, testing::vocab_of(*model_));
  const std::vector<int32_t> prompt = testing::concat(state, std::vector<int32_t>{5, 6, 7});
  std::vector<std::shared_ptr<PendingDecisionPrefix>> pending;
  const int32_t slot = runner.open();
  for (size_t done = 0; done < 128; done += 64) {
    runner.run(
        model::Piece{.slot = slot, .tokens = std::span(state).subspan(done, 64), .wants = model::RowOutput::none});
    pending.push_back(std::make_shared<PendingDecisionPrefix>());
    EXPECT_TRUE(cache.insert(salt, std::span(state).first(done + 64), slot, pending.back(), 400));
  }
  EXPECT_FALSE(cache.lookup(salt, prompt, true)) << "nothing is set yet";
  EXPECT_TRUE(cache.lookup(salt, prompt, false)) << "the backbone's state alone is there";
  pending[0]->set(std::make_shared<KeptRows>(64));
  auto hit = cache.lookup(salt, prompt, true);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->tokens(), 64);
  EXPECT_EQ(hit->decision->positions(), 64);
  pending[1]->set(std::make_shared<KeptRows>(128));
  EXPECT_EQ(cache.lookup(salt, prompt, true)->tokens(), 128);
  EXPECT_EQ(cache.lookup(salt, prompt, true, /*max_tokens=*/127)->tokens(), 64) << "a first span at 127";
  EXPECT_FALSE(cache.lookup(0, prompt, true)) << "another salt";
  EXPECT_EQ(cache.stats().decision_bytes_held, 800u);

  // A third entry would hold 1200 bytes: the least recently used (at 64, looked up last before the one at 128) goes.
  ASSERT_TRUE(cache.lookup(salt, prompt, true, 127));
  runner.run(model::Piece{.slot = slot, .tokens = std::span(state).subspan(128, 64), .wants = model::RowOutput::none});
  pending.push_back(std::make_shared<PendingDecisionPrefix>());
  EXPECT_TRUE(cache.insert(salt, state, slot, pending.back(), 400));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().decision_bytes_held, 800u);
  EXPECT_EQ(cache.lookup(salt, prompt, true, 127)->tokens(), 64) << "the entry at 128 went";
  // One prefix alone over the budget is not kept at all.
  runner.close(slot);
  const std::vector<int32_t> other = testing::prompt_of(64, 22, testing::vocab_of(*model_));
  const int32_t other_slot = runner.open();
  runner.run(model::Piece{.slot = other_slot, .tokens = other, .wants = model::RowOutput::none});
  EXPECT_FALSE(cache.insert(salt, other, other_slot, std::make_shared<PendingDecisionPrefix>(), 1001));
  EXPECT_EQ(cache.stats().entries, 2);
  runner.close(other_slot);
}

}  // namespace
}  // namespace duet::engine
