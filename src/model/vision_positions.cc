#include "model/vision_positions.h"

#include <cmath>

#include "backend/cpu/weight_rows.h"
#include "base/error.h"

namespace duet::model {

void check_vision_grid(const VisionConfig& c, const VisionGrid& g) {
  const int64_t m = c.spatial_merge_size, cap = int64_t{1} << 16;
  if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.t > cap || g.h > cap || g.w > cap)
    fail("vision grid [{}, {}, {}] is out of range (1..{} each)", g.t, g.h, g.w, cap);
  if (g.h % m != 0 || g.w % m != 0)
    fail("vision grid [{}, {}, {}]: height and width must be multiples of spatial_merge_size {}", g.t, g.h, g.w, m);
}

std::vector<PatchPosition> patch_positions(const VisionGrid& g, int64_t merge) {
  std::vector<PatchPosition> out;
  out.reserve(static_cast<size_t>(g.patches()));
  for (int64_t t = 0; t < g.t; ++t)
    for (int64_t bh = 0; bh < g.h / merge; ++bh)
      for (int64_t bw = 0; bw < g.w / merge; ++bw)
        for (int64_t mh = 0; mh < merge; ++mh)
          for (int64_t mw = 0; mw < merge; ++mw) out.push_back({bh * merge + mh, bw * merge + mw});
  return out;
}

float linspace_f32(float start, float end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  if (i < steps / 2) return start + step * static_cast<float>(i);
  return end - step * static_cast<float>(steps - i - 1);
}

PositionTaps position_taps(const VisionConfig& c, const VisionGrid& g, const std::vector<PatchPosition>& positions) {
  const int64_t side = c.grid_side();
  const float last = static_cast<float>(side - 1);
  // Per axis, as Qwen3-VL's fast_pos_embed_interpolate: linspace(0, G - 1, n), floor, the next index clipped, and
  // the fraction, all in float32.
  struct Axis {
    int64_t lo, hi;
    float frac;
  };
  auto axis = [&](int64_t n, int64_t i) {
    const float s = linspace_f32(0.0f, last, n, i);
    const auto lo = static_cast<int64_t>(s);
    return Axis{lo, std::min(lo + 1, side - 1), s - static_cast<float>(lo)};
  };
  PositionTaps taps;
  taps.index.reserve(4 * positions.size());
  taps.weight.reserve(4 * positions.size());
  for (const PatchPosition& p : positions) {
    const Axis y = axis(g.h, p.row), x = axis(g.w, p.col);
    for (const int64_t index : {y.lo * side + x.lo, y.lo * side + x.hi, y.hi * side + x.lo, y.hi * side + x.hi})
      taps.index.push_back(static_cast<int32_t>(index));
    for (const float weight :
         {(1.0f - y.frac) * (1.0f - x.frac), (1.0f - y.frac) * x.frac, y.frac * (1.0f - x.frac), y.frac * x.frac})
      taps.weight.push_back(weight);
  }
  return taps;
}

void add_position_embedding(const VisionConfig& c, const backend::Weight& table, const VisionGrid& g,
                            const std::vector<PatchPosition>& positions, float* x) {
  const int64_t hidden = c.hidden_size;
  const PositionTaps taps = position_taps(c, g, positions);
  std::vector<float> corner(static_cast<size_t>(4 * hidden));
  for (size_t p = 0; p < positions.size(); ++p) {
    const int32_t* index = taps.index.data() + 4 * p;
    const float* weight = taps.weight.data() + 4 * p;
    for (int k = 0; k < 4; ++k)
      backend::cpu::weight_to_float(table, index[k] * hidden, hidden, corner.data() + k * hidden);
    float* row = x + static_cast<int64_t>(p) * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float pos =
          ((corner[j] * weight[0] + corner[hidden + j] * weight[1]) + corner[2 * hidden + j] * weight[2]) +
          corner[3 * hidden + j] * weight[3];
      row[j] += pos;
    }
  }
}

VisionRotary vision_rotary(const VisionConfig& c, const std::vector<PatchPosition>& positions) {
  const int64_t d = c.head_dim(), dim = d / 2, pairs = dim / 2;
  // inv_freq = 1 / theta^(arange(0, dim, 2) / dim), float32 as torch computes it.
  std::vector<float> inv_freq(static_cast<size_t>(pairs));
  const auto theta = static_cast<float>(c.rope_theta);
  for (int64_t i = 0; i < pairs; ++i)
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(dim));
  VisionRotary r;
  r.head_dim = d;
  r.cos.resize(positions.size() * static_cast<size_t>(d));
  r.sin.resize(r.cos.size());
  for (size_t p = 0; p < positions.size(); ++p) {
    float* cs = r.cos.data() + p * d;
    float* sn = r.sin.data() + p * d;
    for (int64_t i = 0; i < pairs; ++i) {
      const float fr = static_cast<float>(positions[p].row) * inv_freq[i];
      const float fc = static_cast<float>(positions[p].col) * inv_freq[i];
      for (const int64_t base : {int64_t{0}, dim}) {  // emb = [f, f], f = [row freqs, column freqs]
        cs[base + i] = std::cos(fr);
        sn[base + i] = std::sin(fr);
        cs[base + pairs + i] = std::cos(fc);
        sn[base + pairs + i] = std::sin(fc);
      }
    }
  }
  return r;
}

void apply_vision_rotary(const float* cos, const float* sin, int64_t d, float* x) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] + (-b) * sin[i];
    x[i + half] = b * cos[i + half] + a * sin[i + half];
  }
}

}  // namespace duet::model
