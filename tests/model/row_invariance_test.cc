// Row invariance (design/architecture.md): a row's bytes depend only on its own sequence. Not on where its prompt
// was cut into pieces (we check cuts at every length, not only multiples of 64: the chunked delta rule keeps its
// chunks aligned to absolute positions, so any cut gives the same arithmetic), not on decode versus prefill, and
// not on which other pieces share the step.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "golden_fixtures.h"
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
  auto state = model_->new_sequence_state(100);
  auto neighbour = model_->new_sequence_state(200);
  auto decoder = model_->new_sequence_state(200);
  Rows shared;
  size_t done = 0, other_done = 0;
  for (size_t n : {70, 30}) {
    std::vector<Piece> step;
    step.push_back({neighbour.get(), std::span<const int32_t>(other_).subspan(other_done, 65), RowOutput::all_logits});
    step.push_back({state.get(), ids.subspan(done, n), RowOutput::all_logits | RowOutput::norm_rows});
    step.push_back({decoder.get(), ids.subspan(7 + done / 10, 1), RowOutput::last_logits});
    auto out = model_->forward(step);
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
  auto state = model_->new_sequence_state(80);
  Piece first{state.get(), std::span<const int32_t>(other_).first(80), RowOutput::none};
  model_->forward({&first, 1});
  state->reset();
  EXPECT_EQ(state->position(), 0);
  Piece again{state.get(), ids.first(80), RowOutput::all_logits | RowOutput::norm_rows};
  const auto out = model_->forward({&again, 1});
  const Rows fresh = run_in_pieces(*model_, ids.first(80), {80});
  EXPECT_TRUE(same_bytes(out[0].norm_rows, fresh.norm_rows));
  EXPECT_TRUE(same_bytes(out[0].logits, fresh.logits));
}

TEST_P(RowInvarianceTest, LastLogitsAreTheLastRowOfAllLogits) {
  const std::span<const int32_t> ids(ids_);
  const Rows all = run_in_pieces(*model_, ids.first(65), {65});
  auto state = model_->new_sequence_state(65);
  Piece piece{state.get(), ids.first(65), RowOutput::last_logits};
  const auto out = model_->forward({&piece, 1});
  const int64_t V = model_->config().vocab_size;
  EXPECT_TRUE(same_bytes(out[0].logits, std::vector<float>(all.logits.end() - V, all.logits.end())));
  EXPECT_TRUE(out[0].norm_rows.empty());
}

TEST_P(RowInvarianceTest, RefusesBadPiecesWithoutMovingState) {
  auto state = model_->new_sequence_state(10);
  std::vector<int32_t> too_long(11, 1), bad_id{1, static_cast<int32_t>(model_->config().vocab_size)};
  Piece overflow{state.get(), too_long, RowOutput::last_logits};
  EXPECT_THROW(model_->forward({&overflow, 1}), duet::Error);
  Piece outside{state.get(), bad_id, RowOutput::last_logits};
  EXPECT_THROW(model_->forward({&outside, 1}), duet::Error);
  std::vector<int32_t> one{1};
  std::vector<Piece> twice{{state.get(), one, RowOutput::none}, {state.get(), one, RowOutput::none}};
  EXPECT_THROW(model_->forward(twice), duet::Error);
  EXPECT_EQ(state->position(), 0);
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

INSTANTIATE_TEST_SUITE_P(Fixtures, RowInvarianceTest, ::testing::Values("tiny-mm", "tiny-text"),
                         [](const auto& info) { return info.param == "tiny-mm" ? "tiny_mm" : "tiny_text"; });

}  // namespace
}  // namespace duet::model
