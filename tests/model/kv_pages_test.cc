// Paged KV cache: a sequence takes 64-position pages from the block manager's pool as it grows and gives them all
// back when it closes; a step that needs more pages than are free is refused before anything moves; and
// rows do not depend on which pages a sequence got (row invariance), byte for byte against a sequence alone on a
// private pool, and within the golden tolerance against transformers.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "engine/piece_runner.h"
#include "golden_fixtures.h"
#include "model/model.h"

namespace duet::model {
namespace {

struct Rows {
  std::vector<float> norm_rows;  // [tokens, hidden]
  std::vector<float> logits;     // [tokens, vocab]
};

void append(Rows& rows, const PieceResult& out) {
  rows.norm_rows.insert(rows.norm_rows.end(), out.norm_rows.begin(), out.norm_rows.end());
  rows.logits.insert(rows.logits.end(), out.logits.begin(), out.logits.end());
}

constexpr RowOutput kAll = RowOutput::all_logits | RowOutput::norm_rows;

// One whole-prompt piece on a sequence of its own (a storage of its own).
Rows run_alone(Model& model, std::span<const int32_t> ids) {
  engine::PieceRunner runner(model, 1, static_cast<int32_t>(ids.size()));
  Rows rows;
  append(rows, runner.run(Piece{.slot = runner.open(), .tokens = ids, .wants = kAll})[0]);
  return rows;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void feed(engine::PieceRunner& runner, int32_t slot, int32_t tokens) {
  const std::vector<int32_t> ids(static_cast<size_t>(tokens), 1);
  runner.run(Piece{.slot = slot, .tokens = ids, .wants = RowOutput::none});
}

class RowInvarianceKvPages : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load(testing::model_fixture(GetParam()));
    goldens_ = std::make_unique<testing::Goldens>(testing::golden_fixture(GetParam(), "fp32"));
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<testing::Goldens> goldens_;
};

TEST_P(RowInvarianceKvPages, PagesAreTakenAsASequenceGrowsAndAllReturned) {
  EXPECT_EQ(model_->kv_page_positions(), 64);
  engine::PieceRunner runner(*model_, 4, 300, /*pages=*/8);
  const engine::BlockManager& blocks = runner.blocks();
  EXPECT_EQ(blocks.free_pages(), 8);
  int32_t slot = runner.open();
  EXPECT_EQ(blocks.table(slot).size(), 0u);  // nothing is taken before the first token
  struct Growth {
    int32_t fed, position, pages;
  };
  for (const auto& [fed, position, pages] :
       {Growth{1, 1, 1}, Growth{63, 64, 1}, Growth{1, 65, 2}, Growth{135, 200, 4}}) {
    feed(runner, slot, fed);
    EXPECT_EQ(runner.position(slot), position);
    EXPECT_EQ(static_cast<int32_t>(blocks.table(slot).size()), pages) << "at position " << position;
    EXPECT_EQ(blocks.free_pages(), 8 - pages) << "at position " << position;
  }
  runner.close(slot);
  EXPECT_EQ(blocks.free_pages(), 8);
  slot = runner.open();
  feed(runner, slot, 130);
  EXPECT_EQ(blocks.free_pages(), 5);
  runner.close(slot);
  EXPECT_EQ(blocks.free_pages(), 8) << "a closed sequence returns its pages";
}

TEST_P(RowInvarianceKvPages, AStepNeedingMorePagesThanFreeIsRefusedWithoutMovingState) {
  const auto ids = goldens_->i32("len130.ids");
  const Rows alone = run_alone(*model_, ids);
  engine::PieceRunner runner(*model_, 4, 300, /*pages=*/3);
  const engine::BlockManager& blocks = runner.blocks();
  const int32_t first = runner.open(), second = runner.open();
  Rows rows;
  append(rows, runner.run(Piece{.slot = first, .tokens = std::span(ids).first(10), .wants = kAll})[0]);
  // 10 + 60 positions need a second page for `first`, 130 need 3 for `second`: 4 > 2 free.
  const std::vector<Piece> step{{.slot = first, .tokens = std::span(ids).subspan(10, 60), .wants = kAll},
                                {.slot = second, .tokens = ids, .wants = kAll}};
  EXPECT_THROW(runner.run(step), duet::Error);
  EXPECT_EQ(runner.position(first), 10);
  EXPECT_EQ(blocks.table(first).size(), 1u);
  EXPECT_EQ(runner.position(second), 0);
  EXPECT_EQ(blocks.table(second).size(), 0u);
  EXPECT_EQ(blocks.free_pages(), 2);
  // The refused step left `first` exactly as it was: it goes on to the same rows as alone.
  append(rows, runner.run(Piece{.slot = first, .tokens = std::span(ids).subspan(10), .wants = kAll})[0]);
  EXPECT_TRUE(same_bytes(rows.norm_rows, alone.norm_rows));
  EXPECT_TRUE(same_bytes(rows.logits, alone.logits));
}

TEST_P(RowInvarianceKvPages, InterleavedPagesGiveTheRowsOfASequenceAlone) {
  const auto long_ids = goldens_->i32("len300.ids"), short_ids = goldens_->i32("len130.ids");
  const Rows long_alone = run_alone(*model_, long_ids), short_alone = run_alone(*model_, short_ids);
  engine::PieceRunner runner(*model_, 4, 300, /*pages=*/16);
  const int32_t filler = runner.open(), a = runner.open(), b = runner.open();
  feed(runner, filler, 64);  // holds page 0 and gives it back midway, so `a` gets pages out of order
  Rows a_rows, b_rows;
  size_t a_done = 0, b_done = 0;
  for (int round = 0; a_done < long_ids.size(); ++round) {
    if (round == 2) runner.close(filler);
    // Pieces of 64 in one step: a and b take their pages turn about (b decodes a token at a time once its
    // prompt is in, so its decode rows land in the same steps as a's prefill rows).
    std::vector<Piece> step;
    const size_t a_n = std::min<size_t>(64, long_ids.size() - a_done);
    step.push_back({.slot = a, .tokens = std::span(long_ids).subspan(a_done, a_n), .wants = kAll});
    const size_t b_n =
        b_done < short_ids.size() ? std::min<size_t>(b_done < 128 ? 64 : 1, short_ids.size() - b_done) : 0;
    if (b_n > 0) step.push_back({.slot = b, .tokens = std::span(short_ids).subspan(b_done, b_n), .wants = kAll});
    const auto out = runner.run(step);
    append(a_rows, out[0]);
    if (b_n > 0) append(b_rows, out[1]);
    a_done += a_n;
    b_done += b_n;
  }
  ASSERT_EQ(b_done, short_ids.size());
  EXPECT_EQ(runner.blocks().table(a).size(), 5u);
  EXPECT_EQ(runner.blocks().table(b).size(), 3u);
  EXPECT_NE(runner.blocks().table(a), (std::vector<int32_t>{0, 1, 2, 3, 4})) << "the control: pages out of order";
  EXPECT_TRUE(same_bytes(a_rows.norm_rows, long_alone.norm_rows));
  EXPECT_TRUE(same_bytes(a_rows.logits, long_alone.logits));
  EXPECT_TRUE(same_bytes(b_rows.norm_rows, short_alone.norm_rows));
  EXPECT_TRUE(same_bytes(b_rows.logits, short_alone.logits));
  // And against transformers, as the golden test checks the contiguous run.
  EXPECT_LE(testing::relative_error(a_rows.norm_rows, goldens_->f32("len300.norm_rows")), 1e-4);
  EXPECT_LE(testing::relative_error(b_rows.norm_rows, goldens_->f32("len130.norm_rows")), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RowInvarianceKvPages, ::testing::Values("tiny-mm", "tiny-text"),
                         [](const auto& info) { return info.param == "tiny-mm" ? "tiny_mm" : "tiny_text"; });

}  // namespace
}  // namespace duet::model
