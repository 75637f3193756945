// Row invariance (design/architecture.md): a row's bytes depend only on its own sequence. Not on where its prompt
// was cut into pieces (we check cuts at every length, not only multiples of 64: the chunked delta rule keeps its
// chunks aligned to absolute positions, so any cut gives the same arithmetic), not on decode versus prefill, and
// not on which other pieces share the step.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "engine/piece_runner.h"
#include "golden_fixtures.h"
#include "launched_ahead.h"
#include "model/model.h"
#include "piece_runs.h"

namespace duet::model {
namespace {

using testing::Rows;
using testing::run_in_pieces;
using testing::same_bytes;

class RowInvarianceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load(testing::model_fixture(GetParam()));
    testing::Goldens goldens(testing::golden_fixture(GetParam(), "fp32"));
    ids_ = goldens.i32("len300.ids");
    other_ = goldens.i32("len130.ids");
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_, other_;
};

TEST_P(RowInvarianceTest, PrefillInPiecesGivesIdenticalRows) {
  const Rows whole = run_in_pieces(*model_, ids_, {ids_.size()});
  for (const std::vector<size_t>& sizes :
       std::vector<std::vector<size_t>>{{1}, {7}, {64}, {128}, {63, 1, 65, 130}, {5, 64, 100}}) {
    const Rows cut = run_in_pieces(*model_, ids_, sizes);
    EXPECT_TRUE(same_bytes(cut.norm_rows, whole.norm_rows)) << "pieces of " << sizes[0];
    EXPECT_TRUE(same_bytes(cut.logits, whole.logits)) << "pieces of " << sizes[0];
  }
}

TEST_P(RowInvarianceTest, RowsDoNotDependOnOtherPiecesInTheStep) {
  const std::span<const int32_t> ids(ids_);
  const Rows alone = run_in_pieces(*model_, ids.first(100), {70, 30});

  // The same two pieces, each in a step with other sequences: a long prefill before it and a decode after it.
  engine::PieceRunner runner(*model_, 3, 200);
  const int32_t state = runner.open(100), neighbour = runner.open(), decoder = runner.open();
  Rows shared;
  size_t done = 0, other_done = 0;
  for (size_t n : {70, 30}) {
    std::vector<Piece> step;
    step.push_back({.slot = neighbour,
                    .tokens = std::span<const int32_t>(other_).subspan(other_done, 65),
                    .wants = RowOutput::all_logits});
    step.push_back(
        {.slot = state, .tokens = ids.subspan(done, n), .wants = RowOutput::all_logits | RowOutput::norm_rows});
    step.push_back({.slot = decoder, .tokens = ids.subspan(7 + done / 10, 1), .wants = RowOutput::last_logits});
    auto out = runner.run(step);
    shared.norm_rows.insert(shared.norm_rows.end(), out[1].norm_rows.begin(), out[1].norm_rows.end());
    shared.logits.insert(shared.logits.end(), out[1].logits.begin(), out[1].logits.end());
    done += n;
    other_done += 65;
  }
  EXPECT_TRUE(same_bytes(shared.norm_rows, alone.norm_rows));
  EXPECT_TRUE(same_bytes(shared.logits, alone.logits));
}

TEST_P(RowInvarianceTest, ResetStateRunsLikeANewOne) {
  const std::span<const int32_t> ids(ids_);
  engine::PieceRunner runner(*model_, 1, 80);
  int32_t state = runner.open();
  runner.run(Piece{.slot = state, .tokens = std::span<const int32_t>(other_).first(80), .wants = RowOutput::none});
  runner.close(state);
  state = runner.open();  // the same slot, reset
  EXPECT_EQ(runner.position(state), 0);
  const auto out =
      runner.run(Piece{.slot = state, .tokens = ids.first(80), .wants = RowOutput::all_logits | RowOutput::norm_rows});
  const Rows fresh = run_in_pieces(*model_, ids.first(80), {80});
  EXPECT_TRUE(same_bytes(out[0].norm_rows, fresh.norm_rows));
  EXPECT_TRUE(same_bytes(out[0].logits, fresh.logits));
}

TEST_P(RowInvarianceTest, LastLogitsAreTheLastRowOfAllLogits) {
  const std::span<const int32_t> ids(ids_);
  const Rows all = run_in_pieces(*model_, ids.first(65), {65});
  engine::PieceRunner runner(*model_, 1, 65);
  const auto out = runner.run(Piece{.slot = runner.open(), .tokens = ids.first(65), .wants = RowOutput::last_logits});
  const int64_t V = model_->config().vocab_size;
  EXPECT_TRUE(same_bytes(out[0].logits, std::vector<float>(all.logits.end() - V, all.logits.end())));
  EXPECT_TRUE(out[0].norm_rows.empty());
}

TEST_P(RowInvarianceTest, RefusesBadPiecesWithoutMovingState) {
  engine::PieceRunner runner(*model_, 1, 10);
  const int32_t state = runner.open();
  std::vector<int32_t> too_long(11, 1), bad_id{1, static_cast<int32_t>(model_->config().vocab_size)};
  EXPECT_THROW(runner.run(Piece{.slot = state, .tokens = too_long, .wants = RowOutput::last_logits}), duet::Error);
  EXPECT_THROW(runner.run(Piece{.slot = state, .tokens = bad_id, .wants = RowOutput::last_logits}), duet::Error);
  std::vector<int32_t> one{1};
  std::vector<Piece> twice{{.slot = state, .tokens = one, .wants = RowOutput::none},
                           {.slot = state, .tokens = one, .wants = RowOutput::none}};
  EXPECT_THROW(runner.run(twice), duet::Error);
  EXPECT_EQ(runner.position(state), 0);
  // The model's own checks, below any runner: pages too few for the positions, a slot outside the storage.
  auto storage = model_->new_state_storage(1, 1);
  const std::vector<int32_t> page{0}, sixty_five(65, 1);
  EXPECT_THROW(model_->forward(*storage, std::vector<Piece>{{.slot = 0, .page_table = page, .tokens = sixty_five}}),
               PieceRefused);
  EXPECT_THROW(model_->forward(*storage, std::vector<Piece>{{.slot = 1, .page_table = page, .tokens = one}}),
               PieceRefused);
}

TEST_P(RowInvarianceTest, StateBytesFollowTheConfig) {
  // The engine's memory plan relies on this: fp32 GDN state (conv history, boundary state, one chunk of rows) per
  // linear_attention layer, fp32 K and V per position per full_attention layer.
  const auto& c = model_->config();
  const int64_t gdn = (c.linear_conv_kernel_dim - 1) * c.gdn_conv_dim() +
                      c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim +
                      c.linear_num_value_heads * 64 * (c.linear_key_head_dim + 1 + c.linear_value_head_dim);
  const int64_t kv_per_position = 2 * c.num_key_value_heads * c.head_dim;
  const int64_t expected = 4 * (c.layer_count(LayerType::linear_attention) * gdn +
                                c.layer_count(LayerType::full_attention) * kv_per_position * 100);
  EXPECT_EQ(model_->sequence_state_bytes(100), static_cast<size_t>(expected));
}

// Steps launched ahead on the CPU backend: each carried row's id and a penalized row's counts taken from the step
// before's draws (tests/model/launched_ahead.h; the CUDA backend's twin is CudaModelTest's).
TEST_P(RowInvarianceTest, StepsLaunchedAheadEqualStepsPlannedAfter) {
  testing::expect_launched_ahead_equals_step_by_step(*model_, other_);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RowInvarianceTest, ::testing::Values("tiny-mm", "tiny-text"),
                         [](const auto& info) { return info.param == "tiny-mm" ? "tiny_mm" : "tiny_text"; });

}  // namespace
}  // namespace duet::model
