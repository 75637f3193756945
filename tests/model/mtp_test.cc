// The MTP layer (model/mtp_weights.h, mtp_forward.cc) on the CPU backend against tools/mtp_reference.py run in fp32
// on models/demo, the trained demo (tools/make_mtp_fixtures.py). The golden stores the MTP layer's input (the main
// model's final-norm rows, which the model goldens gate against transformers), so these tests check the MTP layer
// alone: its rows after and before mtp.norm and its logits at each row's 16 most likely ids, within the CPU gate of the
// model goldens (1e-4 relative: max |got - want| over max |want|, golden_test.cc), row by row through its own KV,
// as one prefill, and drafting three tokens in a row. Planted controls (the token one position early; fc's halves
// swapped in a copy of the checkpoint) must fail that gate. Checkpoints without an MTP layer load without one.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "../checkpoint/damaged_copies.h"
#include "base/error.h"
#include "golden_fixtures.h"
#include "model/model.h"

namespace duet::model {
namespace {

using testing::Goldens;
using testing::relative_error;

constexpr double kTolerance = 1e-4;  // the model goldens' CPU gate
constexpr int64_t kTop = 16;         // logits stored per row

// The logits at the ids the reference found most likely, row by row: [rows, kTop].
std::vector<float> at_top_ids(std::span<const float> logits, std::span<const int32_t> top_ids, int64_t vocab) {
  std::vector<float> picked;
  for (size_t i = 0; i < top_ids.size(); ++i)
    picked.push_back(logits[static_cast<size_t>(i / kTop * vocab + top_ids[i])]);
  return picked;
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

struct Errors {
  double out = 0, pre_norm = 0, logits = 0;
  bool within(double tolerance) const { return out <= tolerance && pre_norm <= tolerance && logits <= tolerance; }
};

class MtpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(::duet::testing::demo_model_dir()).release();
    golden_ = new Goldens(testing::fixture_path("goldens/demo.mtp.safetensors"));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }
  int64_t h() const { return model_->config().hidden_size; }
  int64_t V() const { return model_->config().vocab_size; }
  std::span<const float> hidden_row(const std::vector<float>& rows, int64_t j) const {
    return std::span(rows).subspan(static_cast<size_t>(j * h()), static_cast<size_t>(h()));
  }

  // The MTP rows 0..T-2 (hidden row j with token j+1) as pieces of `run` rows each, in one storage, against the
  // golden. `shift` feeds token j+1-shift instead (the off-by-one control).
  Errors run_sequence(Model& model, int64_t run, int64_t shift = 0) const {
    const auto ids = golden_->i32("ids");
    const auto hidden = golden_->f32("hidden");
    const auto rows = static_cast<int64_t>(ids.size()) - 1;
    auto storage = model.new_mtp_storage(1);
    const std::vector<int32_t> pages = {0};
    std::vector<float> out, pre_norm, logits;
    for (int64_t j = 0; j < rows; j += run) {
      const int64_t n = std::min(run, rows - j);
      const MtpPiece piece{
          .page_table = pages,
          .position = static_cast<int32_t>(j),
          .hidden = std::span(hidden).subspan(static_cast<size_t>(j * h()), static_cast<size_t>(n * h())),
          .tokens = std::span(ids).subspan(static_cast<size_t>(j + 1 - shift), static_cast<size_t>(n)),
          .wants = RowOutput::all_logits | RowOutput::norm_rows,
          .role = n == 1 ? backend::RowRole::decode : backend::RowRole::prefill};
      auto result = model.mtp_forward(*storage, std::span(&piece, 1));
      out.insert(out.end(), result[0].norm_rows.begin(), result[0].norm_rows.end());
      pre_norm.insert(pre_norm.end(), result[0].pre_norm_rows.begin(), result[0].pre_norm_rows.end());
      logits.insert(logits.end(), result[0].logits.begin(), result[0].logits.end());
    }
    return Errors{relative_error(out, golden_->f32("mtp.out")), relative_error(pre_norm, golden_->f32("mtp.pre_norm")),
                  relative_error(at_top_ids(logits, golden_->i32("mtp.top_ids"), V()), golden_->f32("mtp.top_logits"))};
  }

  static Model* model_;
  static Goldens* golden_;
};
Model* MtpTest::model_ = nullptr;
Goldens* MtpTest::golden_ = nullptr;

TEST_F(MtpTest, DemoLoadsItsMtpLayer) {
  EXPECT_TRUE(model_->has_mtp());
  EXPECT_EQ(model_->config().mtp_num_hidden_layers, 1);
  EXPECT_GT(model_->mtp_kv_page_bytes(), 0u);
}

TEST_F(MtpTest, RowByRowThroughItsOwnKvMatchesReference) {
  const Errors e = run_sequence(*model_, 1);
  std::printf("row by row: out %.3g, pre_norm %.3g, logits %.3g\n", e.out, e.pre_norm, e.logits);
  EXPECT_TRUE(e.within(kTolerance));
}

TEST_F(MtpTest, PrefillAndPiecesMatchReference) {
  for (int64_t run : {64, 5}) {
    const Errors e = run_sequence(*model_, run);
    std::printf("pieces of %ld rows: out %.3g, pre_norm %.3g, logits %.3g\n", static_cast<long>(run), e.out, e.pre_norm,
                e.logits);
    EXPECT_TRUE(e.within(kTolerance)) << run;
  }
}

TEST_F(MtpTest, TopTokenMatchesReference) {
  const auto ids = golden_->i32("ids");
  const auto hidden = golden_->f32("hidden");
  const auto top_ids = golden_->i32("mtp.top_ids");
  auto storage = model_->new_mtp_storage(1);
  const std::vector<int32_t> pages = {0};
  const auto rows = ids.size() - 1;
  const MtpPiece piece{.page_table = pages,
                       .hidden = std::span(hidden).first(rows * static_cast<size_t>(h())),
                       .tokens = std::span(ids).subspan(1),
                       .wants = RowOutput::all_logits};
  const auto result = model_->mtp_forward(*storage, std::span(&piece, 1));
  for (size_t j = 0; j < rows; ++j)
    EXPECT_EQ(argmax(std::span(result[0].logits).subspan(j * static_cast<size_t>(V()), static_cast<size_t>(V()))),
              top_ids[j * kTop])
        << "row " << j;
}

// Drafting: after the MTP rows of the sequence, step 1 reads the main model's last final-norm row with the main
// model's greedy token; step k reads step k-1's row after mtp.norm with step k-1's argmax, one position further.
TEST_F(MtpTest, DraftingThreeTokensMatchesReference) {
  const auto ids = golden_->i32("ids");
  const auto hidden = golden_->f32("hidden");
  const auto chain_ids = golden_->i32("chain.ids");
  const auto T = static_cast<int64_t>(ids.size());
  auto storage = model_->new_mtp_storage(1);
  const std::vector<int32_t> pages = {0};
  const MtpPiece prefill{.page_table = pages,
                         .hidden = std::span(hidden).first(static_cast<size_t>((T - 1) * h())),
                         .tokens = std::span(ids).subspan(1),
                         .wants = RowOutput::none};
  model_->mtp_forward(*storage, std::span(&prefill, 1));
  std::vector<float> row(hidden_row(hidden, T - 1).begin(), hidden_row(hidden, T - 1).end());
  std::vector<float> out, pre_norm, logits;
  for (size_t k = 0; k < chain_ids.size(); ++k) {
    const MtpPiece step{.page_table = pages,
                        .position = static_cast<int32_t>(T - 1 + static_cast<int64_t>(k)),
                        .hidden = row,
                        .tokens = std::span(chain_ids).subspan(k, 1),
                        .wants = RowOutput::last_logits | RowOutput::norm_rows | RowOutput::sampled,
                        .role = backend::RowRole::decode};
    auto result = model_->mtp_forward(*storage, std::span(&step, 1));
    if (k + 1 < chain_ids.size()) {
      EXPECT_EQ(argmax(result[0].logits), chain_ids[k + 1]) << "step " << k;
    }
    // The drafter's token (engine/mtp_drafter.h): the backend's greedy draw, the first maximum of the same logits.
    EXPECT_EQ(result[0].sampled, argmax(result[0].logits)) << "step " << k;
    row = result[0].norm_rows;
    out.insert(out.end(), row.begin(), row.end());
    pre_norm.insert(pre_norm.end(), result[0].pre_norm_rows.begin(), result[0].pre_norm_rows.end());
    logits.insert(logits.end(), result[0].logits.begin(), result[0].logits.end());
  }
  const Errors e{
      relative_error(out, golden_->f32("chain.out")), relative_error(pre_norm, golden_->f32("chain.pre_norm")),
      relative_error(at_top_ids(logits, golden_->i32("chain.top_ids"), V()), golden_->f32("chain.top_logits"))};
  std::printf("drafting %zu: out %.3g, pre_norm %.3g, logits %.3g\n", chain_ids.size(), e.out, e.pre_norm, e.logits);
  EXPECT_TRUE(e.within(kTolerance));
}

// Planted control: the token of position j instead of j+1 (the shift every MTP implementation must get right).
TEST_F(MtpTest, ControlTokenOnePositionEarlyFails) {
  const Errors e = run_sequence(*model_, 64, 1);
  std::printf("control, token j instead of j+1: out %.3g, logits %.3g\n", e.out, e.logits);
  EXPECT_GT(e.out, 100 * kTolerance);
  EXPECT_GT(e.logits, 100 * kTolerance);
}

// Planted control: fc's two column halves swapped in a copy of the checkpoint, which is the same as concatenating
// [hidden ; embedding]: the same code on that layout must fail the gate.
TEST_F(MtpTest, ControlSwappedHalvesFails) {
  testing::DamagedCopy copy(::duet::testing::demo_model_dir(), testing::DamagedCopy::Folder{});
  const size_t half = static_cast<size_t>(h()) * 2;  // bytes of one half-row of BF16
  copy.edit_tensor_bytes("model.safetensors", "mtp.fc.weight", [half](char* data, size_t size) {
    for (size_t row = 0; row < size; row += 2 * half)
      std::swap_ranges(data + row, data + row + half, data + row + half);
  });
  auto swapped = Model::load(copy.folder());
  const Errors e = run_sequence(*swapped, 64);
  std::printf("control, fc halves swapped: out %.3g, logits %.3g\n", e.out, e.logits);
  EXPECT_GT(e.out, 100 * kTolerance);
  EXPECT_GT(e.logits, 100 * kTolerance);
}

TEST_F(MtpTest, RefusesAPieceBeforeWritingAnything) {
  auto storage = model_->new_mtp_storage(1);
  const std::vector<int32_t> pages = {0};
  const std::vector<int32_t> tokens = {1, 2};
  const std::vector<float> one_row(static_cast<size_t>(h()));
  const MtpPiece short_hidden{.page_table = pages, .hidden = one_row, .tokens = tokens};
  EXPECT_THROW(model_->mtp_forward(*storage, std::span(&short_hidden, 1)), PieceRefused);
  const std::vector<int32_t> outside = {static_cast<int32_t>(V())};
  const MtpPiece bad_token{.page_table = pages, .hidden = one_row, .tokens = outside};
  EXPECT_THROW(model_->mtp_forward(*storage, std::span(&bad_token, 1)), PieceRefused);
  const MtpPiece past_pages{.page_table = pages, .position = 64, .hidden = one_row, .tokens = {tokens.data(), 1}};
  EXPECT_THROW(model_->mtp_forward(*storage, std::span(&past_pages, 1)), PieceRefused);
}

// tiny-text has no mtp.* and no config field; tiny-mm has one stray mtp tensor and no config field.
TEST(MtpAbsent, CheckpointsWithoutMtpLoadWithoutIt) {
  for (const char* name : {"tiny-text", "tiny-mm"}) {
    auto model = Model::load(testing::model_fixture(name));
    EXPECT_FALSE(model->has_mtp()) << name;
    EXPECT_EQ(model->mtp_kv_page_bytes(), 0u) << name;
    EXPECT_THROW(model->new_mtp_storage(1), Error) << name;
  }
}

// A config that declares an MTP layer the checkpoint does not store (conversions strip it) loads without one.
TEST(MtpAbsent, DeclaredButNotStoredLoadsWithoutIt) {
  testing::DamagedCopy copy("tiny-text");
  copy.edit_json("config.json", [](nlohmann::json& c) { c["mtp_num_hidden_layers"] = 1; });
  EXPECT_FALSE(Model::load(copy.folder())->has_mtp());
}

// Stored in part: refused with the missing tensor's name, rather than run without it.
TEST(MtpAbsent, StoredInPartIsRefused) {
  testing::DamagedCopy copy(::duet::testing::demo_model_dir(), testing::DamagedCopy::Folder{});
  copy.edit_header("model.safetensors", [](nlohmann::json& header) {
    header["mtp.unused.weight"] = header["mtp.norm.weight"];
    header.erase("mtp.norm.weight");
  });
  try {
    Model::load(copy.folder());
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp.norm.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace duet::model
