// The CPU forward pass against transformers 5.17.0 run in FP32 on the same checkpoints (tools/make_model_fixtures.py):
// final-norm rows and logits within 1e-4 relative (max abs difference over max abs reference, per tensor) at every
// prompt length, whole-prompt prefill and prefill-then-decode. On the random tiny fixtures and on the trained demo
// (models/demo; its goldens keep the logits of fewer rows, see make_model_fixtures.py --demo-goldens-only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "engine/piece_runner.h"
#include "golden_fixtures.h"
#include "model/model.h"

namespace duet::model {
namespace {

using testing::Goldens;
using testing::relative_error;

constexpr double kTolerance = 1e-4;
const int kLengths[] = {1, 63, 64, 65, 130, 300};

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load(testing::golden_model(GetParam()));
    goldens_ = std::make_unique<Goldens>(testing::golden_fixture(GetParam(), "fp32"));
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Goldens> goldens_;
};

TEST_P(GoldenTest, WholePromptMatchesTransformersFp32) {
  const int64_t V = model_->config().vocab_size, h = model_->config().hidden_size;
  for (int length : kLengths) {
    const std::string key = "len" + std::to_string(length);
    const auto ids = goldens_->i32(key + ".ids");
    const auto logit_rows = goldens_->i32(key + ".logit_rows");
    engine::PieceRunner runner(*model_, 1, length);
    const auto result =
        runner.run(Piece{.slot = runner.open(), .tokens = ids, .wants = RowOutput::all_logits | RowOutput::norm_rows});
    ASSERT_EQ(result[0].norm_rows.size(), static_cast<size_t>(length * h));
    std::vector<float> logits;
    for (int32_t r : logit_rows)
      logits.insert(logits.end(), result[0].logits.begin() + r * V, result[0].logits.begin() + (r + 1) * V);
    const double norm_error = relative_error(result[0].norm_rows, goldens_->f32(key + ".norm_rows"));
    const double logit_error = relative_error(logits, goldens_->f32(key + ".logits"));
    std::printf("%s fp32 len %3d: norm_rows %.3g, logits %.3g\n", GetParam().c_str(), length, norm_error, logit_error);
    EXPECT_LE(norm_error, kTolerance) << key;
    EXPECT_LE(logit_error, kTolerance) << key;
  }
}

TEST_P(GoldenTest, PrefillThenDecodeMatchesTransformersFp32) {
  const int64_t V = model_->config().vocab_size, h = model_->config().hidden_size;
  const auto prompt = goldens_->i32("decode.prompt");
  const auto fed = goldens_->i32("decode.fed");
  const auto want_norm = goldens_->f32("decode.norm_rows");
  const auto want_logits = goldens_->f32("decode.logits");
  engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(prompt.size() + fed.size()));
  const int32_t slot = runner.open();
  const auto first = runner.run(Piece{.slot = slot, .tokens = prompt, .wants = RowOutput::last_logits});
  const double prefill_error = relative_error(first[0].logits, goldens_->f32("decode.prefill_logits"));
  EXPECT_LE(prefill_error, kTolerance);
  double worst_norm = 0, worst_logits = 0;
  for (size_t i = 0; i < fed.size(); ++i) {
    const auto out =
        runner.run(Piece{.slot = slot, .tokens = {&fed[i], 1}, .wants = RowOutput::last_logits | RowOutput::norm_rows});
    worst_norm = std::max(worst_norm, relative_error(out[0].norm_rows, {want_norm.data() + i * h, size_t(h)}));
    worst_logits = std::max(worst_logits, relative_error(out[0].logits, {want_logits.data() + i * V, size_t(V)}));
  }
  std::printf("%s fp32 decode (prompt %zu, %zu fed): prefill logits %.3g, decode norm_rows %.3g, logits %.3g\n",
              GetParam().c_str(), prompt.size(), fed.size(), prefill_error, worst_norm, worst_logits);
  EXPECT_LE(worst_norm, kTolerance);
  EXPECT_LE(worst_logits, kTolerance);
}

// Layer by layer at length 65 through DUET_DUMP, against transformers' output_hidden_states (hidden.0 the
// embeddings, hidden.k after layer k; transformers' last entry is after the final norm). Printed for finding where
// a mismatch starts; gated loosely, since the outputs above carry the real gate.
TEST_P(GoldenTest, HiddenStatesPerLayer) {
  const auto folder = std::filesystem::temp_directory_path() / ("duet_dump_" + GetParam());
  std::filesystem::remove_all(folder);
  setenv("DUET_DUMP", folder.c_str(), 1);
  auto model = Model::load(testing::golden_model(GetParam()));
  unsetenv("DUET_DUMP");
  const auto ids = goldens_->i32("len65.ids");
  engine::PieceRunner runner(*model, 1, 65);
  runner.run(Piece{.slot = runner.open(), .tokens = ids, .wants = RowOutput::none});
  Goldens dump((folder / "step0.safetensors").string());
  const int64_t layers = model->config().num_hidden_layers;
  for (int64_t k = 0; k <= layers; ++k) {
    const std::string name = "hidden." + std::to_string(k);
    // transformers' hidden_states[layers] is after the final norm; ours is before it.
    const std::string ours = k == layers ? "final_norm" : name;
    const double error = relative_error(dump.f32(ours), goldens_->f32("len65." + name));
    std::printf("%s len 65 %s: %.3g\n", GetParam().c_str(), name.c_str(), error);
    EXPECT_LE(error, kTolerance) << name;
  }
  std::filesystem::remove_all(folder);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::Values("tiny-mm", "tiny-text", "demo"), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace
}  // namespace duet::model
