#pragma once
// A vision tower of any shape with seeded random BF16 weights held in memory (no checkpoint), for the GPU tower's tests
// and its benchmark. Scales as a freshly initialised model's, so activations stay O(1) through the blocks: linear
// weights in +-sqrt(3 / in), biases in +-0.1, LayerNorm weights 1 +- 0.2, the position table in +-0.5.
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

#include "base/bf16.h"
#include "model/vision_config.h"
#include "model/vision_positions.h"
#include "model/vision_weights.h"

namespace duet::testing {

// Deterministic values in [-1, 1) from a counter (splitmix64), the same on every machine.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  float next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }

 private:
  uint64_t state_;
};

class RandomVisionTower {
 public:
  explicit RandomVisionTower(const model::VisionConfig& config, uint64_t seed = 20261203)
      : config_(config), values_(seed) {
    const int64_t h = config.hidden_size, f = config.intermediate_size, m = config.merged_size();
    weights_.patch_embed = linear(h, config.patch_row_size());
    weights_.pos_embed = tensor(config.num_position_embeddings, h, 0.5f, 0.0f);
    for (int64_t i = 0; i < config.depth; ++i) {
      model::VisionBlockWeights block;
      block.norm1 = norm(h);
      block.norm2 = norm(h);
      block.qkv = linear(3 * h, h);
      block.proj = linear(h, h);
      block.fc1 = linear(f, h);
      block.fc2 = linear(h, f);
      weights_.blocks.push_back(block);
    }
    weights_.merger_norm = norm(h);
    weights_.merger_fc1 = linear(m, m);
    weights_.merger_fc2 = linear(config.out_hidden_size, m);
  }

  const model::VisionConfig& config() const { return config_; }
  const model::VisionWeights& weights() const { return weights_; }

  // Pixel rows in [-1, 1) for a grid, as the processor's normalised values are.
  std::vector<float> pixels(const model::VisionGrid& grid, uint64_t seed) const {
    SplitMix v(seed);
    std::vector<float> out(static_cast<size_t>(grid.patches() * config_.patch_row_size()));
    for (float& x : out) x = v.next();
    return out;
  }

 private:
  backend::Weight tensor(int64_t rows, int64_t cols, float scale, float offset) {
    auto& data = storage_.emplace_back(static_cast<size_t>(rows * cols));
    // Qualified: cuda_test_util.h declares duet::testing::float_to_bf16 (returning __nv_bfloat16), which an
    // unqualified call here finds first, and whose implicit conversion to uint16_t is the value rounded to an
    // integer, not its bits: every weight in (-1, 1) became 0 and the random towers computed zeros.
    for (uint16_t& x : data) x = ::duet::float_to_bf16(offset + scale * values_.next());
    return {backend::WeightType::bf16, data.data(), rows, cols};
  }
  model::VisionLinear linear(int64_t out, int64_t in) {
    return {tensor(out, in, std::sqrt(3.0f / static_cast<float>(in)), 0.0f), tensor(1, out, 0.1f, 0.0f)};
  }
  model::VisionLayerNorm norm(int64_t n) { return {tensor(1, n, 0.2f, 1.0f), tensor(1, n, 0.1f, 0.0f)}; }

  model::VisionConfig config_;
  model::VisionWeights weights_;
  SplitMix values_;
  std::deque<std::vector<uint16_t>> storage_;  // stable addresses
};

// The 9B's tower (docs/vision.md 1): 27 blocks of 1152, 16 heads of 72, MLP 4304, a 48 x 48 table, out 4096.
inline model::VisionConfig qwen35_9b_vision_config() {
  model::VisionConfig c;
  c.depth = 27;
  c.hidden_size = 1152;
  c.num_heads = 16;
  c.intermediate_size = 4304;
  c.out_hidden_size = 4096;
  c.num_position_embeddings = 2304;
  return c;
}

}  // namespace duet::testing
