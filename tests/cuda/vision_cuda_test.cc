// Images on the CUDA backend (docs/vision.md 4-5, issue 21): tiny-vl's prompts with images, fed as a server on the GPU
// feeds them (tests/model/vision_prompts.h: src/image, the image rows from the vision tower on the GPU through
// VisionModel::use_device, 3-D positions and the rope delta from model/mrope.h), through the GPU's M-RoPE
// (attention_prep.cu reading the step's row_rope) and write_rows, against transformers FP32
// (tools/make_vision_fixtures.py). The CPU's runs are fed as model_test (vision_lm_test.cc) feeds them: duet's tower on
// the host, in fp32, so that the CPU stands for transformers FP32 end to end.
//
// Why two measures. The GPU's rows carry BF16 rounding: on these tiny random models about 0.02 mean |error| per
// value (model_cuda_test's text goldens), as large as what the positions themselves change (the 1-D control moves the
// FP32 rows by 0.025 mean |error|, the swapped streams by 0.005-0.01). So:
//  1. Fidelity, with model_cuda_test's slack: the GPU's rows of a prompt with images are within 1.25x of transformers
//     FP32 of what the GPU's text path gets on the same prompt read as text (1-D positions, no delta) against the
//     CPU's FP32 rows of that run (the CPU's text path and tower are transformers' within 1e-4, golden_test and
//     model_test (vision_golden_test.cc); the GPU's run has the GPU tower's rows, so the yardstick holds the tower's
//     BF16 rounding too): no transformers BF16 goldens exist for images, and the two GPU runs share every bit up to
//     tiny-vl's one attention layer (its last), so this is the BF16 yardstick of this very prompt. Control: the image
//     rows in transposed token order (write_rows placing rows wrongly) fails it by far.
//  2. The positions' effect, where BF16 noise cancels: the GPU's rows with 3-D positions minus its rows of the same
//     prompt read as text, against transformers FP32's rows minus the CPU's text-path rows. Everything before the
//     attention layer is bit-identical in the two GPU runs, so what is left is the rotation's effect and the rounding
//     of the few operations after it (estimated at 0.1-0.25 of the effect). Gate: half the effect. Controls that
//     must fail it: 1-D positions for the image tokens (effect 0: relative error 1) and decode rows without the
//     prompt's rope delta (1.1 on the CPU). The swapped-streams and time-only controls move rows by only 0.11-0.39 of
//     the effect (measured on the CPU), inside BF16's reach: they are printed, and attention_kernels_test checks the
//     rotation of each pair by its stream against a host reference value for value.
// Also: greedy tokens after the image against transformers' wherever FP32 decides (targets.md's 0.25-logit rule),
// decode steps with a rope delta replayed as CUDA graphs against the same steps launched one by one, a text
// sequence's bytes beside an image sequence, a prompt cut into chunks, and malformed inputs refused. On a machine
// without a GPU every test reports skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../model/golden_fixtures.h"
#include "../model/piece_runs.h"
#include "../model/vision_prompts.h"
#include "cuda_test_util.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::model {
namespace {

using ::duet::testing::kBf16Slack;
using ::duet::testing::mean_abs_error;
using testing::same_bytes;
using testing::VisionPlant;
using testing::VisionPrompt;
using testing::VisionPromptImages;

constexpr double kEffectGate = 0.5;    // the positions' effect within half of itself (measure 2 above)
constexpr float kLogitMargin = 0.25f;  // targets.md: where FP32's top-1 leads by more, the GPU must pick it too

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

// What one run of a prompt gives: its final-norm rows; for the `decode` prompt, the rows of the decode steps that feed
// transformers' greedy tokens (decode.fed) back one by one; and after the prompt and each step, the token the backend
// sampled (greedy) or the row's logits.
struct PromptRun {
  std::vector<float> prompt_rows;          // [prompt tokens, hidden]
  std::vector<float> decode_rows;          // [fed tokens, hidden]
  std::vector<int32_t> tokens;             // RowOutput::sampled: the greedy token after the prompt, each step
  std::vector<int32_t> logprob_bits;       // and its log-probability's bits
  std::vector<std::vector<float>> logits;  // RowOutput::last_logits: the logits there
};

class CudaVision : public ::testing::Test {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    if (const std::string why = testing::VisionFixture::missing(); !why.empty()) GTEST_SKIP() << why;
    fixture_ = std::make_unique<testing::VisionFixture>();
    cuda_ = Model::load(fixture_->model_dir(), "cuda");
    cpu_ = Model::load(fixture_->model_dir(), "cpu");
    ASSERT_TRUE(cuda_->reads_images()) << "the cuda backend must apply M-RoPE";
    gpu_tower_ = VisionModel::load(fixture_->model_dir(), cuda_->config().hidden_size);
    gpu_tower_->use_device(4096);  // as `duet serve --backend cuda` does (sized for every fixture image)
    fed_ = fixture_->goldens().i32("decode.fed");
    greedy_.temperature = 0.0f;
    greedy_.top_logprobs = 0;
  }

  // The prompt as the GPU's runs read it (the image rows from the GPU tower) and as the CPU's do (its host tower).
  VisionPrompt prompt(const VisionPromptImages& which, VisionPlant plant) const {
    return fixture_->prompt(which.label, which.images, plant, gpu_tower_.get());
  }
  VisionPrompt cpu_prompt(const VisionPromptImages& which, VisionPlant plant) const {
    return fixture_->prompt(which.label, which.images, plant);
  }
  // Every pair of every token reads its time stream: M-RoPE with the streams ignored.
  VisionPrompt time_only(const VisionPromptImages& which) const {
    VisionPrompt p = prompt(which, VisionPlant::none);
    for (size_t t = 0; t < p.ids.size(); ++t) p.positions[3 * t + 1] = p.positions[3 * t + 2] = p.positions[3 * t];
    return p;
  }

  // The prompt as one prefill piece, then `fed` as decode steps (rotating with the prompt's delta when `delta`).
  // `out`: RowOutput::sampled (greedy, the GPU's serving path: decode steps graphed) or last_logits.
  PromptRun run(Model& model, const VisionPrompt& p, const std::vector<int32_t>& fed, bool delta, RowOutput out) const {
    engine::PieceRunner runner(model, 1, static_cast<int32_t>(p.ids.size() + fed.size()));
    const int32_t slot = runner.open();
    PromptRun r;
    auto take = [&](const PieceResult& result, std::vector<float>& rows) {
      rows.insert(rows.end(), result.norm_rows.begin(), result.norm_rows.end());
      if (has(out, RowOutput::sampled)) {
        r.tokens.push_back(result.sampled.id);
        r.logprob_bits.push_back(std::bit_cast<int32_t>(result.sampled.logprob));
      }
      if (has(out, RowOutput::last_logits)) r.logits.push_back(result.logits);
    };
    take(runner.run(Piece{.slot = slot,
                          .tokens = p.ids,
                          .wants = RowOutput::norm_rows | out,
                          .sample = &greedy_,
                          .image_rows = p.image_rows,
                          .rope_positions = p.positions})[0],
         r.prompt_rows);
    for (size_t i = 0; i < fed.size(); ++i)
      take(runner.run(Piece{.slot = slot,
                            .tokens = {&fed[i], 1},
                            .wants = RowOutput::norm_rows | out,
                            .role = backend::RowRole::decode,
                            .sample = &greedy_,
                            .rope_delta = delta ? p.delta : 0})[0],
           r.decode_rows);
    return r;
  }

  std::unique_ptr<testing::VisionFixture> fixture_;
  std::unique_ptr<Model> cuda_, cpu_;
  std::unique_ptr<VisionModel> gpu_tower_;
  std::vector<int32_t> fed_;
  backend::SampleSpec greedy_;
};

// The runs both measures read, for one golden prompt: the prompt's rows, and for `decode` its decode rows too.
struct Measured {
  std::string label;
  std::vector<float> golden;    // transformers FP32
  std::vector<float> gpu;       // 3-D positions, the delta in decode
  std::vector<float> gpu_text;  // the prompt read as text: 1-D positions, no delta (the text path)
  std::vector<float> cpu_text;  // the same on the CPU (FP32)
  std::vector<float> gpu_transposed, gpu_swapped, gpu_time_only, gpu_no_delta;  // planted faults
};

class CudaVisionMeasured : public CudaVision {
 protected:
  // one, two, and decode (its prompt rows, then its decode rows as a group of their own).
  std::vector<Measured> groups() {
    std::vector<Measured> out;
    std::vector<VisionPromptImages> prompts = testing::vision_golden_prompts();
    prompts.push_back(testing::vision_decode_prompt());
    for (const VisionPromptImages& which : prompts) {
      const bool decode = std::string(which.label) == "decode";
      const std::vector<int32_t> fed = decode ? fed_ : std::vector<int32_t>{};
      const PromptRun gpu = run(*cuda_, prompt(which, VisionPlant::none), fed, true, RowOutput::sampled);
      const PromptRun gpu_text = run(*cuda_, prompt(which, VisionPlant::positions_1d), fed, false, RowOutput::sampled);
      const PromptRun cpu_text = run(*cpu_, cpu_prompt(which, VisionPlant::positions_1d), fed, false, RowOutput::none);
      const PromptRun transposed =
          run(*cuda_, prompt(which, VisionPlant::transposed_rows), fed, true, RowOutput::sampled);
      const PromptRun swapped = run(*cuda_, prompt(which, VisionPlant::swapped_streams), fed, true, RowOutput::sampled);
      const PromptRun time = run(*cuda_, time_only(which), fed, true, RowOutput::sampled);
      const PromptRun no_delta = run(*cuda_, prompt(which, VisionPlant::none), fed, false, RowOutput::sampled);
      const testing::Goldens& goldens = fixture_->goldens();
      out.push_back({which.label, goldens.f32(std::string(which.label) + ".norm_rows"), gpu.prompt_rows,
                     gpu_text.prompt_rows, cpu_text.prompt_rows, transposed.prompt_rows, swapped.prompt_rows,
                     time.prompt_rows, no_delta.prompt_rows});
      if (decode)
        out.push_back({"decode steps", goldens.f32("decode.decode_rows"), gpu.decode_rows, gpu_text.decode_rows,
                       cpu_text.decode_rows, transposed.decode_rows, swapped.decode_rows, time.decode_rows,
                       no_delta.decode_rows});
    }
    return out;
  }
};

// Measure 1 (the header): the rows of prompts with images are as close to transformers FP32 as BF16 lets the text
// path come on the same prompt; image rows written to the wrong tokens are not.
TEST_F(CudaVisionMeasured, RowsAreAsCloseToFp32AsTheTextPathIs) {
  double image = 0, text = 0, transposed = 0;
  for (const Measured& m : groups()) {
    const double e = mean_abs_error(m.gpu, m.golden), y = mean_abs_error(m.gpu_text, m.cpu_text),
                 c = mean_abs_error(m.gpu_transposed, m.golden);
    std::printf(
        "%-12s mean|err| vs transformers FP32: images %.4g | BF16 yardstick (text path vs the CPU) %.4g | "
        "controls: transposed image rows %.4g, 1-D positions %.4g\n",
        m.label.c_str(), e, y, c, mean_abs_error(m.gpu_text, m.golden));
    image += e, text += y, transposed += c;
  }
  std::printf("all: images %.4g, yardstick %.4g (gate %.2fx), transposed rows %.4g\n", image, text, kBf16Slack,
              transposed);
  EXPECT_LE(image, kBf16Slack * text) << "the rows of prompts with images are further from transformers FP32 than "
                                         "BF16 rounding explains";
  EXPECT_GT(transposed, kBf16Slack * text) << "the control passed: image rows in the wrong places must fail";
}

// Measure 2 (the header): what the 3-D positions and the delta change in the rows, against what they change in
// transformers FP32's.
TEST_F(CudaVisionMeasured, PositionsMoveTheRowsAsTheyMoveTransformers) {
  for (const Measured& m : groups()) {
    const std::vector<float> want = minus(m.golden, m.cpu_text);  // the positions' effect in FP32
    const std::vector<float> none(want.size(), 0.0f);
    const double size = mean_abs_error(want, none);
    auto relative = [&](const std::vector<float>& gpu_rows) {
      return mean_abs_error(minus(gpu_rows, m.gpu_text), want) / size;
    };
    const bool decode_steps = m.label == "decode steps";
    const double error = relative(m.gpu), flat = relative(m.gpu_text), no_delta = relative(m.gpu_no_delta);
    std::printf(
        "%-12s the positions' effect (mean %.4g): relative error %.3g (gate %.2f) | controls: 1-D positions %.3g, "
        "%s%.3g, swapped streams %.3g, time stream only %.3g (the last two not gated)\n",
        m.label.c_str(), size, error, kEffectGate, flat, decode_steps ? "no decode delta " : "(no delta: the prompt) ",
        no_delta, relative(m.gpu_swapped), relative(m.gpu_time_only));
    ASSERT_GT(size, 1e-3) << m.label << ": the positions change transformers' rows too little to measure";
    EXPECT_LE(error, kEffectGate) << m.label << ": the GPU's 3-D positions do not move the rows as transformers'";
    EXPECT_GT(flat, kEffectGate) << m.label << ": the control with 1-D positions for the image tokens must fail";
    if (decode_steps) {
      EXPECT_GT(no_delta, kEffectGate) << "the control: decode rows without the prompt's rope delta must fail";
    }
  }
}

// The greedy tokens after the image (decode steps graphed, with the delta): wherever transformers FP32's top-1 leads
// by more than 0.25 logits the GPU picks it, and elsewhere a token within 0.25 of it (a near tie of a random model).
// FP32's logits are the CPU backend's, whose top-1 is each of transformers' greedy tokens (checked here).
TEST_F(CudaVision, GreedyTokensAfterAnImageAreTransformersWhereFp32Decides) {
  const PromptRun gpu =
      run(*cuda_, prompt(testing::vision_decode_prompt(), VisionPlant::none), fed_, true, RowOutput::sampled);
  const PromptRun cpu =
      run(*cpu_, cpu_prompt(testing::vision_decode_prompt(), VisionPlant::none), fed_, true, RowOutput::last_logits);
  ASSERT_EQ(gpu.tokens.size(), fed_.size() + 1);
  ASSERT_EQ(cpu.logits.size(), fed_.size() + 1);
  int decided = 0;
  for (size_t k = 0; k < cpu.logits.size(); ++k) {
    const std::vector<float>& l = cpu.logits[k];
    const auto top = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    if (k < fed_.size()) {
      ASSERT_EQ(top, fed_[k]) << "the CPU's FP32 top-1 is not transformers' greedy token " << k;
    }
    float second = -INFINITY;
    for (size_t v = 0; v < l.size(); ++v)
      if (static_cast<int32_t>(v) != top) second = std::max(second, l[v]);
    const float margin = l[top] - second, regret = l[top] - l.at(static_cast<size_t>(gpu.tokens[k]));
    decided += margin > kLogitMargin ? 1 : 0;
    std::printf("token %zu: FP32 %d (leads by %.3f), GPU %d (%.3f below FP32's top)\n", k, top, margin, gpu.tokens[k],
                regret);
    EXPECT_LE(regret, kLogitMargin) << "token " << k << ": the GPU picked " << gpu.tokens[k] << ", FP32 " << top;
  }
  std::printf("%d of %zu tokens decided by FP32 (lead > %.2f)\n", decided, cpu.logits.size(), kLogitMargin);
}

// The same fixture on a CUDA backend that launches every step (DUET_CUDA_GRAPHS=0), the graph test's reference.
std::unique_ptr<Model> load_dir_without_graphs(const std::string& dir) {
  setenv("DUET_CUDA_GRAPHS", "0", 1);
  auto model = Model::load(dir, "cuda");
  unsetenv("DUET_CUDA_GRAPHS");
  return model;
}

// A text sequence (9 tokens, no image) and the image prompt, prefilled together; then decode steps of both, of the
// image sequence alone (its delta: the step carries row_rope) and of the text sequence alone (no row_rope), in turn.
// Returns every sampled token, log-probability and final-norm row as bits. `with_image` false: the text sequence's
// steps alone.
std::vector<int32_t> interleaved_steps(Model& model, const VisionPrompt& p, const std::vector<int32_t>& fed,
                                       bool with_image, const backend::SampleSpec& greedy) {
  std::vector<int32_t> text(p.ids.begin(), p.ids.begin() + 3);
  text.insert(text.end(), fed.begin(), fed.end());
  engine::PieceRunner runner(model, 2, static_cast<int32_t>(p.ids.size() + 64));
  const int32_t image = runner.open(), plain = runner.open();
  std::vector<int32_t> out;
  auto take = [&](const PieceResult& r) {
    out.insert(out.end(), {r.sampled.id, std::bit_cast<int32_t>(r.sampled.logprob)});
    for (float x : r.norm_rows) out.push_back(std::bit_cast<int32_t>(x));
  };
  const RowOutput wants = RowOutput::sampled | RowOutput::norm_rows;
  std::vector<Piece> prefill{{.slot = plain, .tokens = text, .wants = wants, .sample = &greedy}};
  if (with_image)
    prefill.push_back({.slot = image,
                       .tokens = p.ids,
                       .wants = wants,
                       .sample = &greedy,
                       .image_rows = p.image_rows,
                       .rope_positions = p.positions});
  for (const PieceResult& r : runner.run(prefill)) take(r);
  int32_t next_image = fed[0], next_text = fed[1];
  for (int step = 0; step < 12; ++step) {
    // with_image: both (step % 3 == 0), the image sequence alone (1), the text sequence alone (2).
    const bool image_runs = with_image && step % 3 != 2, text_runs = !with_image || step % 3 != 1;
    std::vector<Piece> pieces;
    if (image_runs)
      pieces.push_back({.slot = image,
                        .tokens = {&next_image, 1},
                        .wants = wants,
                        .role = backend::RowRole::decode,
                        .sample = &greedy,
                        .rope_delta = p.delta});
    if (text_runs)
      pieces.push_back({.slot = plain,
                        .tokens = {&next_text, 1},
                        .wants = wants,
                        .role = backend::RowRole::decode,
                        .sample = &greedy});
    const auto results = runner.run(pieces);
    for (size_t i = 0; i < pieces.size(); ++i) {
      take(results[i]);
      (pieces[i].slot == image ? next_image : next_text) = results[i].sampled.id;
    }
  }
  return out;
}

// Decode steps with a rope delta replayed as CUDA graphs give the bits of the same steps launched one by one; a step
// of one image row and one of one text row have the same shape but separate graphs (StepGraphKey::rope), and each
// replays its own.
TEST_F(CudaVision, GraphedDecodeAfterAnImageEqualsEager) {
  const VisionPrompt p = prompt(testing::vision_decode_prompt(), VisionPlant::none);
  const std::vector<int32_t> graphed = interleaved_steps(*cuda_, p, fed_, true, greedy_);
  auto eager_model = load_dir_without_graphs(fixture_->model_dir());
  const std::vector<int32_t> eager = interleaved_steps(*eager_model, p, fed_, true, greedy_);
  ASSERT_FALSE(eager.empty());
  EXPECT_EQ(graphed, eager) << "graphed decode steps after an image differ from eager ones";
  // The control: without the delta the image sequence's rows are other bits, so the comparison can see it.
  VisionPrompt no_delta = p;
  no_delta.delta = 0;
  EXPECT_NE(interleaved_steps(*eager_model, no_delta, fed_, true, greedy_), eager);
}

// A text row in a step that carries rotary positions (row_rope: three equal positions) has the bits of the same row in
// a step without them: the text sequence beside the image sequence, prefill and decode, gives its bytes alone.
TEST_F(CudaVision, ATextSequencesBytesDoNotChangeBesideAnImageSequence) {
  const VisionPrompt p = prompt(testing::vision_decode_prompt(), VisionPlant::none);
  // Pick the text sequence's results out of the interleaved run by replaying its step pattern.
  const std::vector<int32_t> alone = interleaved_steps(*cuda_, p, fed_, false, greedy_);
  const std::vector<int32_t> beside = interleaved_steps(*cuda_, p, fed_, true, greedy_);
  const size_t h = static_cast<size_t>(cuda_->config().hidden_size);
  const size_t text_prompt = 3 + fed_.size(), record = 2 + h;  // a decode result: id, logprob, one row
  std::vector<int32_t> text_beside;
  size_t at = 0;
  auto copy = [&](size_t n) {
    text_beside.insert(text_beside.end(), beside.begin() + static_cast<std::ptrdiff_t>(at),
                       beside.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  };
  copy(2 + text_prompt * h);   // the text prefill: its token, logprob and rows
  at += 2 + p.ids.size() * h;  // the image prefill's
  for (int step = 0; step < 12; ++step) {
    if (step % 3 != 2) at += record;  // the image row comes first in its steps (decode rows in piece order)
    if (step % 3 != 1) copy(record);
  }
  ASSERT_EQ(at, beside.size());
  // Alone, the text sequence decodes in all 12 steps; beside the image, in 8 of them, each feeding its own last
  // token at its next position either way: its prefill and first 8 decode steps are the same computation.
  ASSERT_LE(text_beside.size(), alone.size());
  const std::vector<int32_t> alone_first(alone.begin(),
                                         alone.begin() + static_cast<std::ptrdiff_t>(text_beside.size()));
  EXPECT_EQ(text_beside, alone_first) << "a text sequence's bits changed beside an image sequence";
}

// Row invariance: cut at multiples of 64 (through the images), each chunk with its own image rows and positions, the
// prompt gives the bytes of the whole.
TEST_F(CudaVision, ChunkedPromptGivesTheWholePromptsBytes) {
  const VisionPrompt p = prompt(testing::vision_golden_prompts()[1], VisionPlant::none);
  const std::vector<float> whole = testing::prefill_in_chunks(*cuda_, p, p.ids.size());
  for (size_t chunk : {64, 128}) EXPECT_TRUE(same_bytes(testing::prefill_in_chunks(*cuda_, p, chunk), whole)) << chunk;
}

TEST_F(CudaVision, MalformedImageInputsAreRefusedBeforeAnythingRuns) {
  const VisionPrompt p = prompt(testing::vision_golden_prompts()[0], VisionPlant::none);
  const auto h = static_cast<size_t>(cuda_->config().hidden_size);
  engine::PieceRunner runner(*cuda_, 1, static_cast<int32_t>(p.ids.size()));
  const int32_t slot = runner.open();
  const std::span<const float> one_short(p.image_rows.data(), p.image_rows.size() - h);
  EXPECT_THROW(runner.run(Piece{.slot = slot, .tokens = p.ids, .image_rows = one_short}), PieceRefused);
  const std::span<const int32_t> too_few(p.positions.data(), p.positions.size() - 1);
  EXPECT_THROW(runner.run(Piece{.slot = slot, .tokens = p.ids, .rope_positions = too_few}), PieceRefused);
  EXPECT_EQ(runner.position(slot), 0);
}

}  // namespace
}  // namespace duet::model
