// The vision tower against transformers FP32 (tools/make_vision_fixtures.py on the GPU machine): the tiny multimodal
// model tests/fixtures/models/tiny-vl and tests/fixtures/goldens/vision.fp32.safetensors. Per image: pixel_values
// made by src/image from the processor's resized pixels, then the patch embedding, the input of block 0 (positions
// added) and the merger's rows, each within the CPU gate's 1e-4 relative. Skipped, saying so, until the fixtures are
// committed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/weight_rows.h"
#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "cpu_gate.h"
#include "golden_fixtures.h"
#include "image/patches.h"
#include "model/vision_tower.h"
#include "model/weight_binder.h"

namespace duet::model {
namespace {

class VisionGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = testing::golden_fixture("vision", "fp32");
    model_ = testing::model_fixture("tiny-vl");
    if (!std::filesystem::exists(golden_) || !std::filesystem::exists(model_ + "/config.json"))
      GTEST_SKIP() << golden_ << " or " << model_
                   << " is not there yet: run tools/make_vision_fixtures.py on the GPU machine (tools/README.md)";
    file_ = std::make_unique<checkpoint::Checkpoint>(checkpoint::Checkpoint::open_file(golden_));
    for (const std::string& name : file_->names())
      if (name.starts_with("tower.") && name.ends_with(".embeds"))
        images_.push_back(name.substr(6, name.size() - 6 - 7));
    ASSERT_FALSE(images_.empty()) << golden_ << " has no tower.*.embeds";
  }

  std::vector<float> f32(const std::string& name) const {
    const auto* t = file_->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr || t->dtype != checkpoint::DType::f32) return {};
    return {t->data<float>(), t->data<float>() + t->element_count()};
  }

  // The processor's resized image as src/image's patch rows, and its grid.
  image::Patches patches(const std::string& name) const {
    const auto* t = file_->find("img." + name + ".stock.resized");
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    image::Image resized;
    resized.height = static_cast<uint32_t>(t->shape[0]);
    resized.width = static_cast<uint32_t>(t->shape[1]);
    resized.rgb.assign(t->bytes.begin(), t->bytes.end());
    return image::to_patches(resized);
  }

  // The fixture model's tower, its weights bound into its mapped checkpoint (kept with them).
  struct Tower {
    VisionConfig config;
    checkpoint::Checkpoint checkpoint;
    VisionWeights weights;
  };
  std::unique_ptr<Tower> tower() const {
    auto t = std::unique_ptr<Tower>(
        new Tower{VisionConfig::load(model_ + "/config.json"), checkpoint::Checkpoint::open(model_), {}});
    size_t bytes = 0;
    WeightBinder bind(t->checkpoint, bytes);
    t->weights = bind_vision_weights(bind, t->config);
    return t;
  }

  std::string golden_, model_;
  std::unique_ptr<checkpoint::Checkpoint> file_;
  std::vector<std::string> images_;
};

TEST_F(VisionGolden, EveryVisualTensorIsBound) {
  const VisionConfig config = VisionConfig::load(model_ + "/config.json");
  const auto checkpoint = checkpoint::Checkpoint::open(model_);
  size_t bytes = 0;
  WeightBinder bind(checkpoint, bytes);
  bind_vision_weights(bind, config);
  size_t visual = 0;
  for (const std::string& name : checkpoint.names())
    if (name.starts_with("model.visual.")) {
      ++visual;
      EXPECT_TRUE(bind.bound(name)) << name << " is in the checkpoint but not bound";
    }
  EXPECT_EQ(visual, 3u + 12u * static_cast<size_t>(config.depth) + 6u);  // patch_embed 2, pos_embed 1, merger 6
  EXPECT_GT(bytes, 0u);
}

TEST_F(VisionGolden, TowerIsTransformers) {
  const std::unique_ptr<Tower> t = tower();
  const VisionConfig& config = t->config;
  const VisionWeights& weights = t->weights;
  for (const std::string& name : images_) {
    const image::Patches p = patches(name);
    const auto* grid = file_->find("img." + name + ".stock.grid");
    ASSERT_NE(grid, nullptr) << name;
    const VisionGrid g{grid->data<int64_t>()[0], grid->data<int64_t>()[1], grid->data<int64_t>()[2]};
    ASSERT_EQ(g.t, p.grid_t) << name;
    ASSERT_EQ(g.h, p.grid_h) << name;
    ASSERT_EQ(g.w, p.grid_w) << name;
    // Where the golden has this image's pixel_values, src/image's rows are exactly them.
    if (const auto* pv = file_->find("pixel_values." + name); pv != nullptr) {
      ASSERT_EQ(pv->element_count(), static_cast<int64_t>(p.values.size())) << name;
      EXPECT_EQ(std::memcmp(pv->bytes.data(), p.values.data(), pv->bytes.size()), 0) << name;
    }
    VisionTrace trace;
    const auto out = vision_forward(config, weights, p.values.data(), g, &trace);
    const double patch = testing::relative_error(trace.patch_embed, f32("tower." + name + ".patch_embed"));
    const double pos = testing::relative_error(trace.pos_added, f32("tower." + name + ".pos_added"));
    const double embeds = testing::relative_error(out, f32("tower." + name + ".embeds"));
    EXPECT_LE(patch, kCpuGate) << name << ": patch embedding";
    EXPECT_LE(pos, kCpuGate) << name << ": positions added (docs/vision.md 3.2)";
    EXPECT_LE(embeds, kCpuGate) << name << ": the merger's rows";
    std::printf("%-14s grid [%lld, %lld, %lld]: relative error patch %.2e, +positions %.2e, embeds %.2e\n",
                name.c_str(), static_cast<long long>(g.t), static_cast<long long>(g.h), static_cast<long long>(g.w),
                patch, pos, embeds);
  }
}

// The tower a stage at a time (HostVisionRun, as the engine spreads it over steps): two images' runs interleaved stage
// by stage give each image's rows from vision_forward, bit for bit (a run keeps its state to itself).
TEST_F(VisionGolden, InterleavedStagedRunsAreEachImagesRows) {
  const std::unique_ptr<Tower> t = tower();
  const VisionConfig& config = t->config;
  const VisionWeights& weights = t->weights;
  ASSERT_GE(images_.size(), 2u);
  const image::Patches pa = patches(images_.front()), pb = patches(images_.back());
  const VisionGrid ga{pa.grid_t, pa.grid_h, pa.grid_w}, gb{pb.grid_t, pb.grid_h, pb.grid_w};
  auto places = [&](const VisionGrid& g) {
    VisionPatchPlaces p;
    p.table = p.rotary = patch_positions(g, config.spatial_merge_size);
    return p;
  };
  HostVisionRun a(config, weights, pa.values.data(), ga, places(ga));
  HostVisionRun b(config, weights, pb.values.data(), gb, places(gb));
  ASSERT_EQ(a.stages(), config.depth + 2);
  while (!a.done() || !b.done()) {
    if (!a.done()) a.run_stage();
    if (!b.done()) b.run_stage();
  }
  const std::vector<float> want_a = vision_forward(config, weights, pa.values.data(), ga);
  const std::vector<float> want_b = vision_forward(config, weights, pb.values.data(), gb);
  const std::vector<float> got_a = a.take_rows(), got_b = b.take_rows();
  ASSERT_EQ(got_a.size(), want_a.size());
  ASSERT_EQ(got_b.size(), want_b.size());
  EXPECT_EQ(std::memcmp(got_a.data(), want_a.data(), got_a.size() * sizeof(float)), 0) << images_.front();
  EXPECT_EQ(std::memcmp(got_b.data(), want_b.data(), got_b.size() * sizeof(float)), 0) << images_.back();
  EXPECT_THROW(a.run_stage(), Error) << "a finished run refuses another stage";
}

double mean_abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return INFINITY;
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) sum += std::fabs(static_cast<double>(got[i]) - want[i]);
  return sum / static_cast<double>(got.size());
}

// The BF16 yardstick the GPU tower is measured with (VisionRounding::linear_inputs_bf16, cuda_vision_tower_cuda_test):
// it is off transformers by a measurable amount, its patch embedding within BF16's per-element bound (2^-8 of
// sum_k |x_k w_k|), and the GPU test's planted faults (the transposed patch order, 1-D rotary positions, block 0's
// attention projection without its bias), made with the same rounding, are all beyond its 1.25x gate.
TEST_F(VisionGolden, Bf16YardstickSeesThePlantedFaults) {
  const std::unique_ptr<Tower> t = tower();
  const VisionConfig& config = t->config;
  const VisionWeights& weights = t->weights;
  VisionWeights no_bias = weights;
  const std::vector<float> zeros(static_cast<size_t>(config.hidden_size), 0.0f);
  no_bias.blocks[0].proj.bias = {backend::WeightType::f32, zeros.data(), 1, config.hidden_size};
  const int64_t h = config.hidden_size, k = config.patch_row_size();
  std::vector<float> w(static_cast<size_t>(h * k));
  for (int64_t i = 0; i < h * k; ++i)
    w[static_cast<size_t>(i)] = backend::cpu::weight_at(weights.patch_embed.weight, i);
  constexpr auto kRound = VisionRounding::linear_inputs_bf16;
  double yardstick = 0, transposed = 0, one_d = 0, bias = 0;
  for (const std::string& name : images_) {
    const image::Patches p = patches(name);
    const VisionGrid g{p.grid_t, p.grid_h, p.grid_w};
    VisionTrace trace;
    const auto golden = f32("tower." + name + ".embeds");
    yardstick += mean_abs_error(vision_forward(config, weights, p.values.data(), g, &trace, kRound), golden);
    const auto right = patch_positions(g, config.spatial_merge_size);
    std::vector<PatchPosition> t, line;
    for (const auto& q : patch_positions({g.t, g.w, g.h}, 2)) t.push_back({q.col, q.row});
    for (int64_t i = 0; i < g.patches(); ++i) line.push_back({i, i});
    transposed +=
        mean_abs_error(vision_forward_at(config, weights, p.values.data(), g, {t, t}, nullptr, kRound), golden);
    one_d +=
        mean_abs_error(vision_forward_at(config, weights, p.values.data(), g, {right, line}, nullptr, kRound), golden);
    bias += mean_abs_error(vision_forward(config, no_bias, p.values.data(), g, nullptr, kRound), golden);
    const auto golden_patch = f32("tower." + name + ".patch_embed");
    int64_t over = 0;
    double worst = 0;
    for (int64_t r = 0; r < g.patches(); ++r)
      for (int64_t j = 0; j < h; ++j) {
        double magnitude = 0;
        for (int64_t c = 0; c < k; ++c) magnitude += std::fabs(static_cast<double>(p.values[r * k + c]) * w[j * k + c]);
        const double bound = (std::ldexp(1.0, -8) + std::ldexp(1.0, -12)) * magnitude + 1e-6;
        const double error = std::fabs(static_cast<double>(trace.patch_embed[r * h + j]) - golden_patch[r * h + j]);
        over += error > bound ? 1 : 0;
        worst = std::max(worst, error / bound);
      }
    EXPECT_EQ(over, 0) << name << ": the rounded patch embedding beyond BF16's bound (worst " << worst << " of it)";
  }
  std::printf(
      "BF16 yardstick mean|err| %.4g; with it, transposed patch order %.4g, 1-D rotary positions %.4g, a "
      "missing bias %.4g\n",
      yardstick, transposed, one_d, bias);
  EXPECT_GT(yardstick, 0.0);
  EXPECT_GT(transposed, 1.25 * yardstick);
  EXPECT_GT(one_d, 1.25 * yardstick);
  EXPECT_GT(bias, 1.25 * yardstick);
}

}  // namespace
}  // namespace duet::model
