// Forking a sequence (SequenceState::copy_from) on the CPU backend: a copy taken mid-prompt (inside a delta-rule
// chunk, on a chunk boundary, after one token) computes the next rows of the original bit for bit, prefill and
// decode, in KV pages of its own. tests/cuda/fork_cuda_test.cc runs the same on the GPU.
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

TEST_P(ForkState, TheCopyHoldsPagesOfItsOwnAndGivesThemBack) {
  model_->reserve_state(2, 5);
  auto original = model_->new_sequence_state(300);
  auto fork = model_->new_sequence_state(300);
  const std::vector<int32_t> ids = testing::fork_prompt(*model_, 130);
  Piece piece{original.get(), ids, RowOutput::none};
  model_->forward({&piece, 1});
  EXPECT_EQ(model_->free_kv_pages(), 2);
  EXPECT_THROW(fork->copy_from(*original), duet::Error) << "3 pages to copy, 2 free";
  EXPECT_EQ(model_->free_kv_pages(), 2);
  original->reset();
  Piece shorter{original.get(), std::span(ids).first(64), RowOutput::none};
  model_->forward({&shorter, 1});
  fork->copy_from(*original);
  EXPECT_EQ(fork->position(), 64);
  EXPECT_EQ(fork->kv_pages(), 1);
  EXPECT_EQ(model_->free_kv_pages(), 3);
  fork->reset();
  EXPECT_EQ(model_->free_kv_pages(), 4);
  // A state of another store (a model without a shared store gives each state its own) cannot be copied.
  auto other = Model::load(testing::model_fixture(GetParam()));
  auto stranger = other->new_sequence_state(10);
  EXPECT_THROW(fork->copy_from(*stranger), duet::Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForkState, ::testing::Values("tiny-text", "tiny-mm"));

}  // namespace
}  // namespace duet::model
