// The language model reading images on the CPU (docs/vision.md 4-5) against transformers FP32
// (tools/make_vision_fixtures.py): tiny-vl's final-norm rows of the prompts `one`, `two` and `decode` (then its six
// greedy decode steps), within the CPU gate's 1e-4 relative. Everything duet feeds in is its own: the encoded images
// under tests/fixtures/vision/images decoded and preprocessed by src/image, the tower's rows from duet's CPU tower,
// the 3-D positions and the rope delta from model/mrope.h. Planted controls that must fail the same gate: 1-D
// positions for the image tokens, the height and width streams swapped, the image rows in transposed (column-major)
// token order, decode steps without the rope delta. Also: a prompt cut into chunks at multiples of 64 gives the whole
// prompt's bytes, and malformed image inputs are refused before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu_gate.h"
#include "engine/piece_runner.h"
#include "golden_fixtures.h"
#include "model/model.h"
#include "vision_prompts.h"

namespace duet::model {
namespace {

using testing::relative_error;
using Plant = testing::VisionPlant;
using Prompt = testing::VisionPrompt;
using PromptImages = testing::VisionPromptImages;

class VisionLm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::VisionFixture::missing(); !why.empty()) GTEST_SKIP() << why;
    fixture_ = std::make_unique<testing::VisionFixture>();
    goldens_ = &fixture_->goldens();
    model_ = Model::load(fixture_->model_dir());
    ASSERT_EQ(model_->config().image_token_id, fixture_->config().image_token_id);
  }

  Prompt prompt(const std::string& label, const std::vector<std::string>& images, Plant plant) const {
    return fixture_->prompt(label, images, plant);
  }

  // The prompt's final-norm rows, as one prefill piece.
  std::vector<float> prefill(engine::PieceRunner& runner, int32_t slot, const Prompt& p) const {
    return runner
        .run(Piece{.slot = slot,
                   .tokens = p.ids,
                   .wants = RowOutput::norm_rows,
                   .image_rows = p.image_rows,
                   .rope_positions = p.positions})[0]
        .norm_rows;
  }

  // The relative error of the prompt's rows against transformers'.
  double prompt_error(const PromptImages& which, Plant plant) const {
    const Prompt p = prompt(which.label, which.images, plant);
    engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(p.ids.size()));
    return relative_error(prefill(runner, runner.open(), p), goldens_->f32(std::string(which.label) + ".norm_rows"));
  }

  // `decode`: the prompt's error, then the worst of its six decode rows' (each row's own relative error).
  std::pair<double, double> decode_errors(Plant plant) const {
    const Prompt p = prompt("decode", {"small_png"}, plant);
    const std::vector<int32_t> fed = goldens_->i32("decode.fed");
    const std::vector<float> want = goldens_->f32("decode.decode_rows");
    const int64_t h = model_->config().hidden_size;
    engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(p.ids.size() + fed.size()));
    const int32_t slot = runner.open();
    const double prompt = relative_error(prefill(runner, slot, p), goldens_->f32("decode.norm_rows"));
    double worst = 0;
    for (size_t i = 0; i < fed.size(); ++i) {
      const auto out = runner.run(Piece{.slot = slot,
                                        .tokens = {&fed[i], 1},
                                        .wants = RowOutput::norm_rows,
                                        .role = backend::RowRole::decode,
                                        .rope_delta = plant == Plant::no_decode_delta ? 0 : p.delta});
      worst = std::max(worst, relative_error(out[0].norm_rows, {want.data() + i * h, static_cast<size_t>(h)}));
    }
    return {prompt, worst};
  }

  std::unique_ptr<testing::VisionFixture> fixture_;
  const testing::Goldens* goldens_ = nullptr;
  std::unique_ptr<Model> model_;
};

TEST_F(VisionLm, PromptsWithImagesAreTransformers) {
  for (const PromptImages& which : testing::vision_golden_prompts()) {
    const double error = prompt_error(which, Plant::none);
    const double flat = prompt_error(which, Plant::positions_1d);
    const double swapped = prompt_error(which, Plant::swapped_streams);
    const double transposed = prompt_error(which, Plant::transposed_rows);
    std::printf(
        "%-6s norm_rows relative error %.2e; controls: 1-D positions %.2e, height/width streams swapped %.2e, "
        "transposed image rows %.2e\n",
        which.label, error, flat, swapped, transposed);
    EXPECT_LE(error, kCpuGate) << which.label;
    EXPECT_GT(flat, kCpuGate) << which.label << ": the control with 1-D positions must fail the gate";
    EXPECT_GT(swapped, kCpuGate) << which.label << ": the control with the height and width streams swapped must fail";
    EXPECT_GT(transposed, kCpuGate) << which.label << ": the control with transposed image rows must fail the gate";
  }
}

TEST_F(VisionLm, DecodeAfterAnImageIsTransformers) {
  const auto [prompt, decode] = decode_errors(Plant::none);
  const auto [flat_prompt, flat_decode] = decode_errors(Plant::positions_1d);
  const auto [same_prompt, no_delta] = decode_errors(Plant::no_decode_delta);
  std::printf("decode prompt %.2e, 6 decode rows %.2e; controls: 1-D positions %.2e / %.2e, no rope delta %.2e\n",
              prompt, decode, flat_prompt, flat_decode, no_delta);
  EXPECT_LE(prompt, kCpuGate);
  EXPECT_LE(decode, kCpuGate);
  EXPECT_GT(flat_decode, kCpuGate) << "the control with 1-D positions must fail the gate";
  EXPECT_EQ(same_prompt, prompt);
  EXPECT_GT(no_delta, kCpuGate) << "the control: decode rows without the prompt's rope delta must fail the gate";
}

// Row invariance (architecture.md): cut at multiples of 64, each chunk with its own image rows and positions, the
// prompt gives the bytes of the whole.
TEST_F(VisionLm, ChunkedPromptGivesTheWholePromptsBytes) {
  const Prompt p = prompt("two", {"wide_png", "small_png"}, Plant::none);
  const std::vector<float> whole = testing::prefill_in_chunks(*model_, p, p.ids.size());
  const std::vector<float> chunked = testing::prefill_in_chunks(*model_, p, 64);
  ASSERT_EQ(chunked.size(), whole.size());
  EXPECT_EQ(std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)), 0);
}

// docs/vision.md 5: with T = H = W, M-RoPE is 1-D RoPE. A text prompt given 3-D positions equal to its indices (and
// shifted by a delta) gives the bytes of the text path, which is the path every text-only request takes.
TEST_F(VisionLm, EqualStreamsAreTheTextPathsBytes) {
  const std::vector<int32_t> ids = goldens_->i32("decode.fed");
  const auto rows = [&](int32_t delta, bool explicit_positions) {
    std::vector<int32_t> positions;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto p = static_cast<int32_t>(t) + delta;
      positions.insert(positions.end(), {p, p, p});
    }
    engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(ids.size()));
    return runner
        .run(Piece{
            .slot = runner.open(),
            .tokens = ids,
            .wants = RowOutput::norm_rows,
            .rope_positions = explicit_positions ? std::span<const int32_t>(positions) : std::span<const int32_t>{},
            .rope_delta = explicit_positions ? 0 : delta})[0]
        .norm_rows;
  };
  const std::vector<float> text = rows(0, false), equal = rows(0, true);
  EXPECT_EQ(std::memcmp(text.data(), equal.data(), text.size() * sizeof(float)), 0);
  const std::vector<float> shifted = rows(-5, false), shifted_equal = rows(-5, true);
  EXPECT_EQ(std::memcmp(shifted.data(), shifted_equal.data(), text.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(shifted.data(), text.data(), text.size() * sizeof(float)), 0) << "the delta must move them";
}

TEST_F(VisionLm, MalformedImageInputsAreRefused) {
  const Prompt p = prompt("one", {"portrait_jpg"}, Plant::none);
  const int64_t h = model_->config().hidden_size;
  engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(p.ids.size()));
  const int32_t slot = runner.open();
  const std::span<const float> one_short(p.image_rows.data(), p.image_rows.size() - static_cast<size_t>(h));
  EXPECT_THROW(runner.run(Piece{.slot = slot, .tokens = p.ids, .image_rows = one_short}), PieceRefused);
  const std::span<const int32_t> too_few(p.positions.data(), p.positions.size() - 1);
  EXPECT_THROW(runner.run(Piece{.slot = slot, .tokens = p.ids, .rope_positions = too_few}), PieceRefused);
  EXPECT_EQ(runner.position(slot), 0);
  // A text-only model (qwen3_5_text) has no image token.
  const auto text = Model::load(testing::model_fixture("tiny-text"));
  ASSERT_EQ(text->config().image_token_id, -1);
  engine::PieceRunner text_runner(*text, 1, static_cast<int32_t>(p.ids.size()));
  EXPECT_THROW(text_runner.run(Piece{.slot = text_runner.open(), .tokens = p.ids, .image_rows = p.image_rows}),
               PieceRefused);
}

}  // namespace
}  // namespace duet::model
