// The vision tower on a small random tower made here (deterministic weights, no fixtures): the position table lands
// on the patches docs/vision.md 2.5 says, planted mistakes (a transposed or raster patch order, 1-D rotary positions)
// change the output, and one image's embeddings are the same bytes alone or after other images.
#include "model/vision_tower.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "model/vision_weights.h"
#include "model/weight_binder.h"

namespace duet::model {
namespace {

// Deterministic values in [-scale, scale) from a counter (splitmix64), the same on every machine.
class Values {
 public:
  float next(float scale) {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return scale * (static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }

 private:
  uint64_t state_ = 20261202;
};

// A tower of the fixture's shape (2 blocks, width 32, 2 heads of 16, a 6 x 6 position table, out 64), F32 weights
// owned here.
class RandomTower {
 public:
  RandomTower() {
    config_.depth = 2;
    config_.hidden_size = 32;
    config_.num_heads = 2;
    config_.intermediate_size = 48;
    config_.out_hidden_size = 64;
    config_.num_position_embeddings = 36;
    const int64_t h = 32, f = 48, m = 128;
    weights_.patch_embed = linear("patch_embed.proj", h, config_.patch_row_size());
    named_[0].shape = {h, 3, 2, 16, 16};  // the Conv3d's stored shape
    weights_.pos_embed = tensor("pos_embed.weight", {36, h}, 0.5f);
    for (int i = 0; i < config_.depth; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      VisionBlockWeights block;
      block.norm1 = norm(b + "norm1", h);
      block.norm2 = norm(b + "norm2", h);
      block.qkv = linear(b + "attn.qkv", 3 * h, h);
      block.proj = linear(b + "attn.proj", h, h);
      block.fc1 = linear(b + "mlp.linear_fc1", f, h);
      block.fc2 = linear(b + "mlp.linear_fc2", h, f);
      weights_.blocks.push_back(block);
    }
    weights_.merger_norm = norm("merger.norm", h);
    weights_.merger_fc1 = linear("merger.linear_fc1", m, m);
    weights_.merger_fc2 = linear("merger.linear_fc2", 64, m);
  }
  // Every tensor with its stock name (without "model.visual."), stored shape and F32 values.
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    const std::vector<float>* values;
  };
  const std::vector<Named>& named() const { return named_; }
  const VisionConfig& config() const { return config_; }
  const VisionWeights& weights() const { return weights_; }
  // Random pixel rows in [-1, 1) for a grid.
  std::vector<float> pixels(const VisionGrid& grid, uint64_t seed) {
    Values v;
    for (uint64_t i = 0; i < seed; ++i) v.next(1);
    std::vector<float> out(static_cast<size_t>(grid.patches() * config_.patch_row_size()));
    for (float& x : out) x = v.next(1.0f);
    return out;
  }

 private:
  backend::Weight tensor(const std::string& name, std::vector<int64_t> shape, float scale, float offset = 0) {
    const int64_t rows = shape[0], cols = shape.size() == 1 ? shape[0] : shape[1];
    auto& data = storage_.emplace_back(static_cast<size_t>(shape.size() == 1 ? rows : rows * cols));
    for (float& x : data) x = offset + values_.next(scale);
    named_.push_back({name, shape, &data});
    if (shape.size() == 1) return {backend::WeightType::f32, data.data(), 1, rows};
    return {backend::WeightType::f32, data.data(), rows, cols};
  }
  VisionLinear linear(const std::string& name, int64_t out, int64_t in) {
    return {tensor(name + ".weight", {out, in}, std::sqrt(3.0f / static_cast<float>(in))),
            tensor(name + ".bias", {out}, 0.1f)};
  }
  VisionLayerNorm norm(const std::string& name, int64_t n) {
    return {tensor(name + ".weight", {n}, 0.2f, 1.0f), tensor(name + ".bias", {n}, 0.1f)};
  }

  VisionConfig config_;
  VisionWeights weights_;
  Values values_;
  std::deque<std::vector<float>> storage_;  // stable addresses
  std::vector<Named> named_;
};

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  return diff / ref;
}

TEST(VisionTower, PatchOrderIsMergeBlocksInRasterOrder) {
  const std::vector<PatchPosition> p = patch_positions({1, 4, 6}, 2);
  ASSERT_EQ(p.size(), 24u);
  // Block (0, 0): (0,0) (0,1) (1,0) (1,1); then block (0, 1) starts at column 2; block row 1 starts at row 2.
  const int64_t want[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 4}};
  for (size_t i = 0; i < std::size(want); ++i) {
    EXPECT_EQ(p[i].row, want[i][0]) << i;
    EXPECT_EQ(p[i].col, want[i][1]) << i;
  }
  EXPECT_EQ(p[12].row, 2);
  EXPECT_EQ(p[12].col, 0);
  EXPECT_EQ(p[23].row, 3);
  EXPECT_EQ(p[23].col, 5);
}

TEST(VisionTower, LinspaceIsTorchs) {
  // torch.linspace(0, 47, 5) = [0, 11.75, 23.5, 35.25, 47]; one step: [0].
  const float want[] = {0.0f, 11.75f, 23.5f, 35.25f, 47.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(linspace_f32(0, 47, 5, i), want[i]);
  EXPECT_EQ(linspace_f32(0, 47, 1, 0), 0.0f);
  EXPECT_EQ(linspace_f32(0, 5, 6, 5), 5.0f);
}

TEST(VisionTower, PositionTableOnItsOwnGridIsTheTable) {
  // A 6 x 6 grid on the 6 x 6 table: align_corners puts every patch exactly on its table row.
  RandomTower tower;
  const VisionGrid grid{1, 6, 6};
  const auto pixels = tower.pixels(grid, 1);
  VisionTrace trace;
  vision_forward(tower.config(), tower.weights(), pixels.data(), grid, &trace);
  const auto positions = patch_positions(grid, 2);
  const auto* table = static_cast<const float*>(tower.weights().pos_embed.data);
  for (size_t p = 0; p < positions.size(); ++p)
    for (int64_t j = 0; j < 32; ++j) {
      const size_t i = p * 32 + static_cast<size_t>(j);
      ASSERT_EQ(trace.pos_added[i], trace.patch_embed[i] + table[(positions[p].row * 6 + positions[p].col) * 32 + j])
          << "patch " << p;
    }
}

TEST(VisionTower, RotaryTurnsRowsAndColumnsInTheirQuarters) {
  RandomTower tower;
  const VisionRotary r = vision_rotary(tower.config(), {{0, 0}, {3, 0}, {0, 5}});
  ASSERT_EQ(r.head_dim, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(r.cos[i], 1.0f) << i;  // position (0, 0): no turn
  // Row 3: dims 0..3 and 8..11 turn, 4..7 and 12..15 not; column 5 the other way round.
  for (int i = 0; i < 16; ++i) {
    const bool row_dim = (i % 8) < 4;
    EXPECT_EQ(r.cos[16 + i] == 1.0f, !row_dim) << i;
    EXPECT_EQ(r.cos[32 + i] == 1.0f, row_dim) << i;
  }
  EXPECT_FLOAT_EQ(r.cos[16], std::cos(3.0f));
  EXPECT_FLOAT_EQ(r.sin[32 + 4], std::sin(5.0f));
  EXPECT_FLOAT_EQ(r.cos[16 + 1], std::cos(3.0f * std::pow(10000.0f, -2.0f / 8.0f)));
}

TEST(VisionTower, OutputHasOneRowPerToken) {
  RandomTower tower;
  const VisionGrid grid{1, 4, 6};
  const auto pixels = tower.pixels(grid, 2);
  const auto out = vision_forward(tower.config(), tower.weights(), pixels.data(), grid);
  EXPECT_EQ(out.size(), 6u * 64u);
  for (float v : out) ASSERT_TRUE(std::isfinite(v));
}

TEST(VisionTower, PlantedMistakesChangeTheOutput) {
  RandomTower tower;
  const VisionGrid grid{1, 4, 6};
  const auto pixels = tower.pixels(grid, 3);
  const auto right = vision_forward(tower.config(), tower.weights(), pixels.data(), grid);

  const auto correct = patch_positions(grid, 2);
  VisionPatchPlaces same{correct, correct};
  EXPECT_EQ(vision_forward_at(tower.config(), tower.weights(), pixels.data(), grid, same), right);

  // The patches read as if the grid were transposed (the merge-block order of a w x h grid, rows and columns
  // swapped), for the table and the rotary.
  std::vector<PatchPosition> transposed;
  for (const auto& p : patch_positions({1, grid.w, grid.h}, 2)) transposed.push_back({p.col, p.row});
  // Plain raster order, ignoring the 2x2 blocks.
  std::vector<PatchPosition> raster;
  for (int64_t i = 0; i < grid.patches(); ++i) raster.push_back({i / grid.w, i % grid.w});
  // 1-D rotary positions (every dim turned by the patch's index), the table as it should be.
  std::vector<PatchPosition> one_d;
  for (int64_t i = 0; i < grid.patches(); ++i) one_d.push_back({i, i});

  struct Planted {
    const char* what;
    VisionPatchPlaces places;
  };
  const Planted planted[] = {{"transposed patch order", {transposed, transposed}},
                             {"raster patch order", {raster, raster}},
                             {"1-D rotary positions", {correct, one_d}},
                             {"transposed table only", {transposed, correct}},
                             {"transposed rotary only", {correct, transposed}}};
  for (const Planted& p : planted) {
    const auto wrong = vision_forward_at(tower.config(), tower.weights(), pixels.data(), grid, p.places);
    ASSERT_EQ(wrong.size(), right.size());
    // Far outside the CPU gate's 1e-4 of transformers.
    EXPECT_GT(relative_difference(wrong, right), 1e-2) << p.what;
  }
}

TEST(VisionTower, AnImageIsTheSameBytesAloneOrAfterOthers) {
  RandomTower tower;
  const VisionGrid a{1, 4, 6}, b{1, 8, 2}, c{2, 2, 2};
  const auto pa = tower.pixels(a, 4), pb = tower.pixels(b, 5), pc = tower.pixels(c, 6);
  const auto alone = vision_forward(tower.config(), tower.weights(), pa.data(), a);
  const auto other = vision_forward(tower.config(), tower.weights(), pb.data(), b);
  const auto two_frames = vision_forward(tower.config(), tower.weights(), pc.data(), c);
  const auto after = vision_forward(tower.config(), tower.weights(), pa.data(), a);
  ASSERT_EQ(after.size(), alone.size());
  EXPECT_EQ(std::memcmp(after.data(), alone.data(), alone.size() * sizeof(float)), 0);
  EXPECT_EQ(other.size(), 4u * 64u);
  EXPECT_EQ(two_frames.size(), 2u * 64u);
  // Frames attend only within themselves: a two-frame grid's first frame is that frame alone.
  const VisionGrid one{1, 2, 2};
  const std::vector<float> first(pc.begin(), pc.begin() + static_cast<int64_t>(pc.size() / 2));
  const auto frame = vision_forward(tower.config(), tower.weights(), first.data(), one);
  EXPECT_EQ(std::memcmp(frame.data(), two_frames.data(), frame.size() * sizeof(float)), 0);
}

TEST(VisionTower, RefusesAGridThatIsNotWholeMergeBlocks) {
  RandomTower tower;
  const std::vector<float> pixels(static_cast<size_t>(3 * 4 * 1536));
  EXPECT_THROW(vision_forward(tower.config(), tower.weights(), pixels.data(), {1, 3, 4}), Error);
}

// The random tower written in the stock layout (F32) to a folder, `leave_out` left out and `reshape`d one given
// another shape: what bind_vision_weights reads or refuses.
std::string write_tower(const RandomTower& tower, const std::string& leave_out = "", const std::string& reshape = "") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("duet-vision-" + std::to_string(::getpid()) + "-" + leave_out + "-" + reshape);
  std::filesystem::create_directories(dir);
  std::vector<checkpoint::TensorToWrite> tensors;
  for (const auto& t : tower.named()) {
    if (t.name == leave_out) continue;
    std::vector<int64_t> shape = t.shape;
    if (t.name == reshape) shape = {shape[0] / 2, shape.size() == 1 ? 2 : 2 * shape[1]};
    tensors.push_back({"model.visual." + t.name, checkpoint::DType::f32, shape, checkpoint::as_bytes_of(*t.values)});
  }
  checkpoint::write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir.string();
}

TEST(VisionTower, BindsTheStockNamesAndRefusesByName) {
  RandomTower tower;
  const VisionGrid grid{1, 4, 6};
  const auto pixels = tower.pixels(grid, 7);
  const auto in_memory = vision_forward(tower.config(), tower.weights(), pixels.data(), grid);
  {
    const std::string dir = write_tower(tower);
    const auto checkpoint = checkpoint::Checkpoint::open(dir);
    size_t bytes = 0;
    WeightBinder bind(checkpoint, bytes);
    const VisionWeights bound = bind_vision_weights(bind, tower.config());
    size_t stored = 0;
    for (const auto& t : tower.named()) stored += t.values->size() * sizeof(float);
    EXPECT_EQ(bytes, stored);
    for (const auto& t : tower.named()) EXPECT_TRUE(bind.bound("model.visual." + t.name)) << t.name;
    EXPECT_EQ(vision_forward(tower.config(), bound, pixels.data(), grid), in_memory);
    std::filesystem::remove_all(dir);
  }
  for (const auto& [leave_out, reshape] : {std::pair<std::string, std::string>{"merger.linear_fc2.bias", ""},
                                           {"blocks.1.attn.qkv.weight", ""},
                                           {"", "blocks.0.mlp.linear_fc1.weight"},
                                           {"", "pos_embed.weight"}}) {
    const std::string dir = write_tower(tower, leave_out, reshape);
    const auto checkpoint = checkpoint::Checkpoint::open(dir);
    size_t bytes = 0;
    WeightBinder bind(checkpoint, bytes);
    std::string message;
    try {
      bind_vision_weights(bind, tower.config());
    } catch (const Error& e) {
      message = e.what();
    }
    const std::string named = "model.visual." + (leave_out.empty() ? reshape : leave_out);
    EXPECT_NE(message.find(named), std::string::npos) << named << ": " << message;
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace duet::model
