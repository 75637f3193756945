#include "model/vision_tower.h"

#include <cmath>

#include "backend/cpu/matmul.h"
#include "backend/cpu/scalar_math.h"
#include "backend/cpu/weight_rows.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::model {

namespace {

using backend::cpu::accumulate_rows;
using backend::cpu::dot_rows;
using backend::cpu::matmul;
using backend::cpu::scaled_softmax;
using backend::cpu::weight_at;

// y = x · W^T + b: [m, in] -> [m, out], x first rounded to BF16 under VisionRounding::linear_inputs_bf16.
std::vector<float> linear(const float* x, int64_t m, const VisionLinear& l, VisionRounding rounding) {
  std::vector<float> y(static_cast<size_t>(m * l.weight.rows));
  std::vector<float> rounded;
  if (rounding == VisionRounding::linear_inputs_bf16) {
    rounded.assign(x, x + m * l.weight.cols);
    for (float& v : rounded) v = round_to_bf16(v);
    x = rounded.data();
  }
  matmul(x, m, l.weight, y.data());
  const int64_t n = l.weight.rows;
  std::vector<float> bias(static_cast<size_t>(n));
  backend::cpu::weight_to_float(l.bias, 0, n, bias.data());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * n + j] += bias[j];
  return y;
}

// nn.LayerNorm over each row of x [m, n] (plain w and b), statistics in double in a fixed order.
std::vector<float> layer_norm(const float* x, int64_t m, int64_t n, const VisionLayerNorm& norm, float eps) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * n;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) squares += (xr[i] - mean) * (xr[i] - mean);
    const auto rstd = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));
    const auto mean_f = static_cast<float>(mean);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = ((xr[i] - mean_f) * rstd) * weight_at(norm.weight, i) + weight_at(norm.bias, i);
  }
  return y;
}

// gelu_pytorch_tanh, as torch's gelu(approximate="tanh") in float32.
float gelu_tanh(float x) {
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
  const float inner = beta * (x + kappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

// nn.GELU(): the exact erf form.
float gelu_erf(float x) { return x * 0.5f * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

// Non-causal softmax attention of every head within each frame's rows. qkv: [N, 3 * hidden] with RoPE applied to
// q and k; out: [N, hidden], heads concatenated head-major. Each query row is one fixed-order computation.
void frame_attention(const float* qkv, int64_t n, int64_t frame_rows, int64_t heads, int64_t d, float* out) {
  const int64_t hidden = heads * d, stride = 3 * hidden;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  global_thread_pool().parallel_for(static_cast<size_t>(n), [&](size_t begin, size_t end) {
    std::vector<float> p(static_cast<size_t>(frame_rows));
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
      const int64_t first = i / frame_rows * frame_rows;
      for (int64_t h = 0; h < heads; ++h) {
        const float* q = qkv + i * stride + h * d;
        dot_rows(q, qkv + first * stride + hidden + h * d, stride, frame_rows, d, p.data());
        scaled_softmax(p.data(), frame_rows, scale);
        float* o = out + i * hidden + h * d;
        for (int64_t e = 0; e < d; ++e) o[e] = 0;
        accumulate_rows(p.data(), qkv + first * stride + 2 * hidden + h * d, stride, frame_rows, d, o);
      }
    }
  });
}

void block_forward(const VisionConfig& c, const VisionBlockWeights& b, const VisionRotary& rope, int64_t frame_rows,
                   int64_t n, VisionRounding rounding, std::vector<float>& x) {
  const int64_t hidden = c.hidden_size, heads = c.num_heads, d = c.head_dim();
  // Attention.
  std::vector<float> y = layer_norm(x.data(), n, hidden, b.norm1, c.layer_norm_eps);
  std::vector<float> qkv = linear(y.data(), n, b.qkv, rounding);  // [n, 3 * hidden]
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (const int64_t part : {int64_t{0}, hidden})  // q, then k
        apply_vision_rotary(rope.cos.data() + i * d, rope.sin.data() + i * d, d,
                            qkv.data() + i * 3 * hidden + part + h * d);
  frame_attention(qkv.data(), n, frame_rows, heads, d, y.data());
  std::vector<float> a = linear(y.data(), n, b.proj, rounding);
  for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
  // MLP.
  y = layer_norm(x.data(), n, hidden, b.norm2, c.layer_norm_eps);
  std::vector<float> f = linear(y.data(), n, b.fc1, rounding);
  for (float& v : f) v = gelu_tanh(v);
  a = linear(f.data(), n, b.fc2, rounding);
  for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
}

}  // namespace

std::vector<float> vision_forward(const VisionConfig& c, const VisionWeights& w, const float* pixel_values,
                                  const VisionGrid& grid, VisionTrace* trace, VisionRounding rounding) {
  check_vision_grid(c, grid);
  VisionPatchPlaces places;
  places.table = patch_positions(grid, c.spatial_merge_size);
  places.rotary = places.table;
  return vision_forward_at(c, w, pixel_values, grid, places, trace, rounding);
}

std::vector<float> vision_forward_at(const VisionConfig& c, const VisionWeights& w, const float* pixel_values,
                                     const VisionGrid& grid, const VisionPatchPlaces& places, VisionTrace* trace,
                                     VisionRounding rounding) {
  HostVisionRun run(c, w, pixel_values, grid, places, trace, rounding);
  while (!run.done()) run.run_stage();
  return run.take_rows();
}

HostVisionRun::HostVisionRun(const VisionConfig& c, const VisionWeights& w, const float* pixel_values,
                             const VisionGrid& grid, VisionPatchPlaces places, VisionTrace* trace,
                             VisionRounding rounding)
    : VisionRun(static_cast<int32_t>(c.depth) + 2),
      config_(c),
      weights_(w),
      pixel_values_(pixel_values),
      grid_(grid),
      places_(std::move(places)),
      trace_(trace),
      rounding_(rounding) {
  check_vision_grid(c, grid);
  const int64_t n = grid.patches();
  if (static_cast<int64_t>(places_.table.size()) != n || static_cast<int64_t>(places_.rotary.size()) != n)
    fail("vision tower: {} and {} patch places for {} patches", places_.table.size(), places_.rotary.size(), n);
  if (static_cast<int64_t>(w.blocks.size()) != c.depth)
    fail("vision tower: {} blocks bound, config says {}", w.blocks.size(), c.depth);
}

void HostVisionRun::run(int32_t stage) {
  const VisionConfig& c = config_;
  const VisionWeights& w = weights_;
  const int64_t n = grid_.patches(), hidden = c.hidden_size;
  if (stage == 0) {
    x_ = linear(pixel_values_, n, w.patch_embed, rounding_);  // [n, hidden]
    pixel_values_ = nullptr;
    if (trace_ != nullptr) trace_->patch_embed = x_;
    add_position_embedding(c, w.pos_embed, grid_, places_.table, x_.data());
    if (trace_ != nullptr) trace_->pos_added = x_;
    rope_ = vision_rotary(c, places_.rotary);
  } else if (stage <= c.depth) {
    block_forward(c, w.blocks[static_cast<size_t>(stage - 1)], rope_, grid_.h * grid_.w, n, rounding_, x_);
  } else {
    // Merger: LayerNorm per patch, the 2x2 group's four rows side by side, fc1, exact GELU, fc2.
    const std::vector<float> y = layer_norm(x_.data(), n, hidden, w.merger_norm, c.layer_norm_eps);
    x_ = {};
    const int64_t tokens = n / c.merge_group();
    std::vector<float> f = linear(y.data(), tokens, w.merger_fc1, rounding_);
    for (float& v : f) v = gelu_erf(v);
    rows_ = linear(f.data(), tokens, w.merger_fc2, rounding_);
  }
}

}  // namespace duet::model
