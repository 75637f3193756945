// The vision tower on the GPU (model/cuda/device_vision_tower.h, issue 21): every fixture image through it against
// transformers FP32 (tools/make_vision_fixtures.py: tests/fixtures/goldens/vision.fp32.safetensors, the tower of
// tests/fixtures/models/tiny-vl) and against the CPU tower.
//
// Why a yardstick. The GPU feeds its GEMMs BF16 (the pixel values, the LayerNorms', the attention's and the GELUs'
// outputs), so it cannot meet the CPU's 1e-4 gate. What BF16 costs is measured, not guessed: the CPU tower run with
// exactly those values rounded to BF16 (model::VisionRounding::linear_inputs_bf16) and everything else in fp32. Gates:
//  - the GPU's rows within 1.25x (model_cuda_test's slack) of that yardstick's mean |error| against transformers FP32,
//    and against the CPU tower in fp32;
//  - the GPU no further from the yardstick than the yardstick is from FP32: the two round at the same places and
//    differ only in fp32 summation order, but on these tiny towers that is not small: a relative 1e-6 of noise on
//    every GEMM output of the CPU yardstick (tried by hand) moved its rows by 0.1-0.6 of its own error, as values
//    near BF16's rounding points go the other way, while its error against FP32 stayed within 2%;
//  - the first two stages (the patch embedding, one GEMM; the positions added) per element within BF16's bound;
//  - planted faults fail the first gate: the transposed patch order and 1-D rotary positions of model_test
//  (vision_tower_test.cc), and
//    a missing bias (block 0's attention projection);
//  - batch invariance: an image's rows alone are the same bits after other images, and a frame's rows the same bits
//    in a two-frame grid as alone.
// Also: thousands of patches (the attention's tiles) and heads of 72 (the 9B's) on random towers against the same
// yardstick, the served path (VisionModel::use_device) and what the device tower refuses. On a machine without a GPU
// every test reports skipped with the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../model/golden_fixtures.h"
#include "backend/cpu/weight_rows.h"
#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "cuda_test_util.h"
#include "image/patches.h"
#include "model/cuda/device_vision_tower.h"
#include "model/vision_model.h"
#include "model/vision_tower.h"
#include "model/weight_binder.h"
#include "random_vision_tower.h"

namespace duet::model {
namespace {

using ::duet::testing::kBf16Slack;
using ::duet::testing::mean_abs_error;
using ::duet::testing::same_bits;

using cuda::DeviceVisionTower;

constexpr double kSameRounding = 1.0;  // the GPU against the yardstick: within the yardstick's own error
constexpr int64_t kMaxPatches = 4096;  // the test towers' size: every fixture image and the 64 x 64 grid

// The patch places of model_test's planted faults (vision_tower_test.cc): the grid read transposed, and 1-D rotary
// positions.
std::vector<PatchPosition> transposed_places(const VisionGrid& grid) {
  std::vector<PatchPosition> out;
  for (const auto& p : patch_positions({grid.t, grid.w, grid.h}, 2)) out.push_back({p.col, p.row});
  return out;
}
std::vector<PatchPosition> one_d_places(const VisionGrid& grid) {
  std::vector<PatchPosition> out;
  for (int64_t i = 0; i < grid.patches(); ++i) out.push_back({i, i});
  return out;
}

// One fixture image: its pixel values (src/image from the processor's resized pixels), grid and goldens.
struct FixtureImage {
  std::string name;
  image::Patches patches;
  VisionGrid grid;
  std::vector<float> golden_patch_embed, golden_pos_added, golden_embeds;
};

class VisionTowerCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    const std::string golden = testing::golden_fixture("vision", "fp32"), dir = testing::model_fixture("tiny-vl");
    if (!std::filesystem::exists(golden) || !std::filesystem::exists(dir + "/config.json"))
      GTEST_SKIP() << golden << " or " << dir << " is not there: tools/make_vision_fixtures.py (tools/README.md)";
    file_ = std::make_unique<checkpoint::Checkpoint>(checkpoint::Checkpoint::open_file(golden));
    checkpoint_ = std::make_unique<checkpoint::Checkpoint>(checkpoint::Checkpoint::open(dir));
    config_ = VisionConfig::load(dir + "/config.json");
    size_t bytes = 0;
    WeightBinder bind(*checkpoint_, bytes);
    weights_ = bind_vision_weights(bind, config_);
    for (const std::string& name : file_->names())
      if (name.starts_with("tower.") && name.ends_with(".embeds"))
        images_.push_back(image(name.substr(6, name.size() - 13)));
    ASSERT_FALSE(images_.empty()) << golden << " has no tower.*.embeds";
    tower_ = std::make_unique<DeviceVisionTower>(config_, weights_, kMaxPatches);
  }

  std::vector<float> f32(const std::string& name) const {
    const auto* t = file_->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr || t->dtype != checkpoint::DType::f32) return {};
    return {t->data<float>(), t->data<float>() + t->element_count()};
  }

  FixtureImage image(const std::string& name) const {
    FixtureImage out;
    out.name = name;
    const auto* resized = file_->find("img." + name + ".stock.resized");
    EXPECT_NE(resized, nullptr) << name;
    if (resized == nullptr) return out;
    image::Image pixels;
    pixels.height = static_cast<uint32_t>(resized->shape[0]);
    pixels.width = static_cast<uint32_t>(resized->shape[1]);
    pixels.rgb.assign(resized->bytes.begin(), resized->bytes.end());
    out.patches = image::to_patches(pixels);
    out.grid = {out.patches.grid_t, out.patches.grid_h, out.patches.grid_w};
    out.golden_patch_embed = f32("tower." + name + ".patch_embed");
    out.golden_pos_added = f32("tower." + name + ".pos_added");
    out.golden_embeds = f32("tower." + name + ".embeds");
    return out;
  }

  // The CPU tower on an image: fp32 (transformers' arithmetic) or with the GPU's BF16 roundings (the yardstick).
  std::vector<float> cpu(const FixtureImage& im, VisionRounding rounding, VisionTrace* trace = nullptr) const {
    return vision_forward(config_, weights_, im.patches.values.data(), im.grid, trace, rounding);
  }

  std::unique_ptr<checkpoint::Checkpoint> file_, checkpoint_;
  VisionConfig config_;
  VisionWeights weights_;
  std::vector<FixtureImage> images_;
  std::unique_ptr<DeviceVisionTower> tower_;
};

// The patch embedding is one GEMM of BF16-rounded pixels: each output within 2^-8 sum_k |x_k w_k| of transformers'
// (BF16's unit roundoff on every x_k, plus fp32's summation); the positions are added in fp32 from the same table
// and taps as the CPU's, so the stage after them adds only the CPU gate's 1e-4 of the positions' size.
TEST_F(VisionTowerCuda, FirstStagesAreWithinBf16sBoundOfTransformers) {
  const int64_t h = config_.hidden_size, k = config_.patch_row_size();
  std::vector<float> w(static_cast<size_t>(h * k));
  backend::cpu::weight_to_float(weights_.patch_embed.weight, 0, h * k, w.data());
  for (const FixtureImage& im : images_) {
    VisionTrace gpu, yardstick;
    tower_->rows(im.patches.values.data(), im.grid, &gpu);
    cpu(im, VisionRounding::linear_inputs_bf16, &yardstick);
    ASSERT_EQ(gpu.patch_embed.size(), im.golden_patch_embed.size()) << im.name;
    ASSERT_EQ(gpu.pos_added.size(), im.golden_pos_added.size()) << im.name;
    double positions = 0;
    for (size_t i = 0; i < im.golden_pos_added.size(); ++i)
      positions =
          std::max(positions, std::fabs(static_cast<double>(im.golden_pos_added[i]) - im.golden_patch_embed[i]));
    int64_t over_patch = 0, over_pos = 0;
    double worst = 0;
    for (int64_t r = 0; r < im.grid.patches(); ++r)
      for (int64_t j = 0; j < h; ++j) {
        double magnitude = 0;
        for (int64_t c = 0; c < k; ++c)
          magnitude += std::fabs(static_cast<double>(im.patches.values[r * k + c]) * w[j * k + c]);
        const double bound = (std::ldexp(1.0, -8) + std::ldexp(1.0, -12)) * magnitude + 1e-6;
        const size_t i = static_cast<size_t>(r * h + j);
        const double patch = std::fabs(static_cast<double>(gpu.patch_embed[i]) - im.golden_patch_embed[i]);
        const double pos = std::fabs(static_cast<double>(gpu.pos_added[i]) - im.golden_pos_added[i]);
        over_patch += patch > bound ? 1 : 0;
        over_pos += pos > bound + 1e-4 * positions ? 1 : 0;
        worst = std::max(worst, patch / bound);
      }
    const double to_yardstick = testing::relative_error(gpu.pos_added, yardstick.pos_added);
    std::printf(
        "%-14s patch embedding: %lld of %zu over the bound (worst %.2f of it), +positions: %lld over; "
        "relative error to the yardstick's %.2e\n",
        im.name.c_str(), static_cast<long long>(over_patch), gpu.patch_embed.size(), worst,
        static_cast<long long>(over_pos), to_yardstick);
    EXPECT_EQ(over_patch, 0) << im.name
                             << ": the patch embedding is further from transformers than BF16 pixels explain";
    EXPECT_EQ(over_pos, 0) << im.name << ": the positions added (docs/vision.md 3.2)";
    EXPECT_LE(to_yardstick, 1e-5) << im.name << ": the same rounding, other than fp32's summation order";
  }
}

TEST_F(VisionTowerCuda, RowsAreAsCloseToTransformersAsBf16Allows) {
  double gpu = 0, yardstick = 0, gpu_cpu = 0, yardstick_cpu = 0, gpu_yardstick = 0;
  for (const FixtureImage& im : images_) {
    const std::vector<float> rows = tower_->rows(im.patches.values.data(), im.grid);
    const std::vector<float> rounded = cpu(im, VisionRounding::linear_inputs_bf16);
    const std::vector<float> fp32 = cpu(im, VisionRounding::none);
    const double e = mean_abs_error(rows, im.golden_embeds), y = mean_abs_error(rounded, im.golden_embeds),
                 ec = mean_abs_error(rows, fp32), yc = mean_abs_error(rounded, fp32),
                 ey = mean_abs_error(rows, rounded);
    std::printf(
        "%-14s grid [%lld, %lld, %lld] mean|err| vs transformers FP32: GPU %.4g | BF16 yardstick %.4g | vs the "
        "CPU tower: GPU %.4g, yardstick %.4g | GPU vs yardstick %.4g (relative error to FP32 %.2e)\n",
        im.name.c_str(), static_cast<long long>(im.grid.t), static_cast<long long>(im.grid.h),
        static_cast<long long>(im.grid.w), e, y, ec, yc, ey, testing::relative_error(rows, im.golden_embeds));
    gpu += e, yardstick += y, gpu_cpu += ec, yardstick_cpu += yc, gpu_yardstick += ey;
  }
  std::printf(
      "all: GPU %.4g, yardstick %.4g (gate %.2fx); vs the CPU tower %.4g, %.4g; GPU vs yardstick %.4g (gate "
      "%.2fx the yardstick's)\n",
      gpu, yardstick, kBf16Slack, gpu_cpu, yardstick_cpu, gpu_yardstick, kSameRounding);
  ASSERT_GT(yardstick, 0.0) << "BF16 rounding changed nothing: the yardstick measures nothing";
  EXPECT_LE(gpu, kBf16Slack * yardstick) << "further from transformers FP32 than BF16 rounding explains";
  EXPECT_LE(gpu_cpu, kBf16Slack * yardstick_cpu) << "further from the CPU tower than BF16 rounding explains";
  EXPECT_LE(gpu_yardstick, kSameRounding * yardstick) << "the GPU does not round where the yardstick does";
}

TEST_F(VisionTowerCuda, PlantedFaultsFailTheGate) {
  // A bias left out: block 0's attention projection without its bias (zeros in its place).
  VisionWeights no_bias = weights_;
  const std::vector<float> zeros(static_cast<size_t>(config_.hidden_size), 0.0f);
  no_bias.blocks[0].proj.bias = {backend::WeightType::f32, zeros.data(), 1, config_.hidden_size};
  DeviceVisionTower missing_bias(config_, no_bias, kMaxPatches);
  double yardstick = 0, transposed = 0, one_d = 0, bias = 0;
  for (const FixtureImage& im : images_) {
    yardstick += mean_abs_error(cpu(im, VisionRounding::linear_inputs_bf16), im.golden_embeds);
    const auto right = patch_positions(im.grid, config_.spatial_merge_size);
    const auto t = transposed_places(im.grid);
    transposed += mean_abs_error(tower_->rows_at(im.patches.values.data(), im.grid, {t, t}), im.golden_embeds);
    one_d += mean_abs_error(tower_->rows_at(im.patches.values.data(), im.grid, {right, one_d_places(im.grid)}),
                            im.golden_embeds);
    bias += mean_abs_error(missing_bias.rows(im.patches.values.data(), im.grid), im.golden_embeds);
  }
  std::printf(
      "yardstick %.4g (gate %.2fx): transposed patch order %.4g, 1-D rotary positions %.4g, a missing bias "
      "%.4g\n",
      yardstick, kBf16Slack, transposed, one_d, bias);
  EXPECT_GT(transposed, kBf16Slack * yardstick) << "the control passed: the transposed patch order must fail";
  EXPECT_GT(one_d, kBf16Slack * yardstick) << "the control passed: 1-D rotary positions must fail";
  EXPECT_GT(bias, kBf16Slack * yardstick) << "the control passed: a missing bias must fail";
}

// Batch invariance: the tower runs one image at a time with one pinned GEMM algorithm per shape, so an image's rows do
// not depend on what ran before (nor on the scratch a larger image left behind).
TEST_F(VisionTowerCuda, AnImagesRowsAreTheSameBitsAloneOrAfterOthers) {
  const FixtureImage& a = images_.front();
  DeviceVisionTower fresh(config_, weights_, kMaxPatches);
  const std::vector<float> alone = fresh.rows(a.patches.values.data(), a.grid);
  for (const FixtureImage& other : images_) fresh.rows(other.patches.values.data(), other.grid);
  testing::RandomVisionTower pixels_of(config_);
  const VisionGrid large{1, 64, 64};
  fresh.rows(pixels_of.pixels(large, 7).data(), large);
  EXPECT_TRUE(same_bits(fresh.rows(a.patches.values.data(), a.grid), alone)) << a.name << " after other images";
  EXPECT_TRUE(same_bits(tower_->rows(a.patches.values.data(), a.grid), alone)) << a.name << " on another tower";
}

// The tower a stage at a time (model/vision_run.h, as the engine's TowerRunner runs it between steps) is rows()'s
// bits, with another thread's rows() waiting for the run to end rather than writing its scratch meanwhile; a run of
// another image between two runs changes nothing either. The control: the other image's rows differ.
TEST_F(VisionTowerCuda, AStagedRunIsTheWholeRunsBits) {
  const FixtureImage& a = images_.front();
  const FixtureImage& b = images_.back();
  const std::vector<float> whole = tower_->rows(a.patches.values.data(), a.grid);
  const std::vector<float> other = tower_->rows(b.patches.values.data(), b.grid);
  std::unique_ptr<model::VisionRun> run = tower_->start(a.patches.values.data(), a.grid);
  EXPECT_EQ(run->stages(), config_.depth + 2);
  run->run_stage();
  std::vector<float> waited;
  std::thread meanwhile([&] { waited = tower_->rows(b.patches.values.data(), b.grid); });
  while (!run->done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    run->run_stage();
  }
  EXPECT_TRUE(same_bits(run->take_rows(), whole)) << a.name << " a stage at a time";
  run.reset();  // lets the other thread's rows() run
  meanwhile.join();
  EXPECT_TRUE(same_bits(waited, other)) << b.name << " from another thread during the run";
  EXPECT_FALSE(same_bits(other, whole)) << "the control: another image's rows";
}

// The yardstick gates of RowsAreAsCloseToTransformersAsBf16Allows, on a random tower and pixels, against the CPU tower
// in fp32 (transformers' arithmetic, within 1e-4 of it on the fixtures). Returns the GPU's rows.
std::vector<float> expect_within_bf16(const testing::RandomVisionTower& tower, DeviceVisionTower& gpu,
                                      const VisionGrid& grid, const char* what) {
  const std::vector<float> pixels = tower.pixels(grid, 5);
  const std::vector<float> rows = gpu.rows(pixels.data(), grid);
  const std::vector<float> fp32 = vision_forward(tower.config(), tower.weights(), pixels.data(), grid);
  const std::vector<float> rounded =
      vision_forward(tower.config(), tower.weights(), pixels.data(), grid, nullptr, VisionRounding::linear_inputs_bf16);
  const double e = mean_abs_error(rows, fp32), y = mean_abs_error(rounded, fp32), ey = mean_abs_error(rows, rounded);
  const double size = mean_abs_error(fp32, std::vector<float>(fp32.size(), 0.0f));
  std::printf(
      "%s, grid [%lld, %lld, %lld]: mean|row| %.4g; mean|err| vs the CPU tower in fp32: GPU %.4g, BF16 yardstick "
      "%.4g; GPU vs yardstick %.4g\n",
      what, static_cast<long long>(grid.t), static_cast<long long>(grid.h), static_cast<long long>(grid.w), size, e, y,
      ey);
  // The random towers keep activations O(1) (their rows' mean |value| is 0.54-0.58 on the CPU): rows of zeros mean
  // the tower computed nothing (its weights were once all 0, random_vision_tower.h) and every gate below holds
  // vacuously.
  EXPECT_GT(size, 0.1) << what << ": the random tower's rows are (nearly) zeros";
  EXPECT_GT(y, 0.0) << what << ": BF16 rounding changed nothing: the yardstick measures nothing";
  EXPECT_LE(e, kBf16Slack * y) << what;
  EXPECT_LE(ey, kSameRounding * y) << what;
  return rows;
}

// Frames attend within themselves: a two-frame grid's first frame is that frame alone, bit for bit, though every GEMM
// ran with twice the rows (PinnedGemm: the same algorithm for every m); the second frame differs (the control).
TEST_F(VisionTowerCuda, AFramesRowsAreTheSameBitsInATwoFrameGrid) {
  testing::RandomVisionTower tower(config_);
  DeviceVisionTower gpu(tower.config(), tower.weights(), kMaxPatches);
  const VisionGrid two{2, 6, 8}, one{1, 6, 8};
  const std::vector<float> both = expect_within_bf16(tower, gpu, two, "two frames");
  const std::vector<float> pixels = tower.pixels(two, 5);  // expect_within_bf16's
  const std::vector<float> first = gpu.rows(pixels.data(), one);
  ASSERT_EQ(both.size(), 2 * first.size());
  const auto half = static_cast<std::ptrdiff_t>(first.size());
  EXPECT_TRUE(same_bits(std::vector<float>(both.begin(), both.begin() + half), first)) << "the first frame";
  EXPECT_FALSE(same_bits(std::vector<float>(both.begin() + half, both.end()), first))
      << "the control: the second frame's rows (other pixels) are the first frame's";
}

// 4096 patches in one frame: 64 query tiles of 64 against 128 key tiles of 32, the running max and sum across them.
TEST_F(VisionTowerCuda, ThousandsOfPatchesAreWithinBf16) {
  testing::RandomVisionTower tower(config_);
  DeviceVisionTower gpu(tower.config(), tower.weights(), kMaxPatches);
  expect_within_bf16(tower, gpu, {1, 64, 64}, "tiny-vl's shape");
}

// Heads of 72, the 9B's (the fixture's are 16): two heads, one block.
TEST(VisionTowerCudaShapes, HeadsOf72AreWithinBf16) {
  DUET_REQUIRE_GPU();
  VisionConfig c;
  c.depth = 1;
  c.hidden_size = 144;
  c.num_heads = 2;
  c.intermediate_size = 96;
  c.out_hidden_size = 64;
  c.num_position_embeddings = 36;
  testing::RandomVisionTower tower(c);
  DeviceVisionTower gpu(c, tower.weights(), 1024);
  expect_within_bf16(tower, gpu, {1, 12, 16}, "heads of 72");
  expect_within_bf16(tower, gpu, {1, 30, 34}, "heads of 72");
}

TEST(VisionTowerCudaShapes, RefusesWhatItCannotTakeByName) {
  DUET_REQUIRE_GPU();
  VisionConfig c;
  c.depth = 1;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.intermediate_size = 48;
  c.out_hidden_size = 64;
  c.num_position_embeddings = 36;
  testing::RandomVisionTower tower(c);
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(nothing refused)");
  };
  // F32 linear weights: no lossy cast at load.
  VisionWeights f32_weights = tower.weights();
  const std::vector<float> qkv(static_cast<size_t>(3 * 32 * 32), 0.5f);
  f32_weights.blocks[0].qkv.weight = {backend::WeightType::f32, qkv.data(), 96, 32};
  EXPECT_NE(
      message([&] { DeviceVisionTower refused(c, f32_weights, 64); }).find("model.visual.blocks.0.attn.qkv.weight"),
      std::string::npos);
  // Heads of 24: not compiled.
  VisionConfig odd = c;
  odd.hidden_size = 48;
  odd.num_heads = 2;
  testing::RandomVisionTower odd_tower(odd);
  EXPECT_NE(message([&] { DeviceVisionTower refused(odd, odd_tower.weights(), 64); }).find("heads of 24"),
            std::string::npos);
  // An image larger than the tower was sized for.
  DeviceVisionTower small(c, tower.weights(), 64);
  const VisionGrid grid{1, 8, 10};
  const std::vector<float> pixels = tower.pixels(grid, 3);
  EXPECT_NE(message([&] { small.rows(pixels.data(), grid); }).find("at most 64"), std::string::npos);
}

// The served path: VisionModel::use_device (what `duet serve --backend cuda` calls) gives the device tower's bits, and
// an image over its size the host tower's.
TEST_F(VisionTowerCuda, TheServedTowerIsTheDeviceTower) {
  const FixtureImage& a = images_.front();
  auto served = VisionModel::load(testing::model_fixture("tiny-vl"), config_.out_hidden_size);
  EXPECT_FALSE(served->on_device());
  served->use_device(kMaxPatches);
  ASSERT_TRUE(served->on_device());
  EXPECT_GT(served->device_bytes(), 0u);
  EXPECT_TRUE(same_bits(served->rows(a.patches.values, a.grid), tower_->rows(a.patches.values.data(), a.grid)));
  auto too_small = VisionModel::load(testing::model_fixture("tiny-vl"), config_.out_hidden_size);
  too_small->use_device(a.grid.patches() - 4);
  EXPECT_TRUE(same_bits(too_small->rows(a.patches.values, a.grid), cpu(a, VisionRounding::none)));
}

}  // namespace
}  // namespace duet::model
