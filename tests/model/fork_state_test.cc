// Forking a sequence (engine::PieceRunner::fork) on the CPU backend: a fork taken mid-prompt (inside a delta-rule
// chunk, on a chunk boundary, after one token) computes the next rows of the original bit for bit, prefill and
// decode, sharing the full KV pages. tests/cuda/fork_cuda_test.cc runs the same on the GPU.
#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_runs.h"
#include "golden_fixtures.h"

namespace duet::model {
namespace {

class ForkState : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Model::load(testing::model_fixture(GetParam())); }
  std::unique_ptr<Model> model_;
};

TEST_P(ForkState, TheForkComputesTheOriginalsNextRowsBitForBit) { testing::expect_forks_equal_originals(*model_); }

TEST_P(ForkState, TheForkSharesFullPagesAndGivesThemBack) {
  engine::PieceRunner runner(*model_, 2, 300, /*pages=*/5);
  engine::BlockManager& blocks = runner.blocks();
  const int32_t original = runner.open(), fork = runner.open();
  const std::vector<int32_t> ids = testing::fork_prompt(*model_, 130);
  runner.run(Piece{.slot = original, .tokens = ids, .wants = RowOutput::none});
  EXPECT_EQ(blocks.free_pages(), 2);
  runner.fork(original, fork);
  EXPECT_EQ(runner.position(fork), 130);
  EXPECT_EQ(blocks.free_pages(), 1) << "two full pages shared, the third copied";
  EXPECT_EQ(blocks.references(blocks.table(original)[0]), 2);
  runner.close(original);
  EXPECT_EQ(blocks.free_pages(), 2) << "only the original's own last page comes back";
  runner.close(fork);
  EXPECT_EQ(blocks.free_pages(), 5);
  // A fork that needs a page the pool does not have is refused, and takes nothing.
  engine::PieceRunner tight(*model_, 2, 300, /*pages=*/3);
  const int32_t a = tight.open(), b = tight.open();
  tight.run(Piece{.slot = a, .tokens = ids, .wants = RowOutput::none});
  EXPECT_THROW(tight.fork(a, b), duet::Error);
  EXPECT_TRUE(tight.blocks().table(b).empty());
  EXPECT_EQ(tight.blocks().references(tight.blocks().table(a)[0]), 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForkState, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::model
