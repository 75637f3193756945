// Gated softmax attention on the CPU: q_proj gives per head [query | gate]; q_norm and k_norm (1 + w); partial
// RoPE; causal attention over the sequence's KV cache (GQA); output times sigmoid(gate); o_proj. All fp32.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "backend/cpu/adapted_projection.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/scalar_math.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::backend::cpu {

namespace {

// Rotates dims [0, rotary_dim) of one head in place, pairing i with i + rotary_dim / 2 (rotate_half), at angle
// position_of(i) * inv_freq[i]; inv_freq[i] = theta^(-2i / rotary_dim) computed in fp32 as transformers does. 1-D
// RoPE gives every frequency the same position; M-RoPE gives frequency i its stream's (docs/vision.md 5), with the
// same arithmetic, so a row whose three positions are equal gets the 1-D bits.
template <class PositionOf>
void rotate(float* head, int64_t rotary_dim, double theta, PositionOf position_of) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float base_power = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), exponent));
    const float inv_freq = 1.0f / base_power;
    const float angle = inv_freq * static_cast<float>(position_of(i));
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    const float x1 = head[i], x2 = head[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
  }
}

// Where a row rotates: one position (text), or its (time, height, width) positions and which one each frequency reads.
struct RopeAt {
  int64_t position = 0;
  const int32_t* thw = nullptr;  // [3], or null for 1-D
  std::span<const int32_t> streams;
  void apply(float* head, int64_t rotary_dim, double theta) const {
    if (thw == nullptr) {
      rotate(head, rotary_dim, theta, [&](int64_t) { return position; });
    } else {
      rotate(head, rotary_dim, theta, [&](int64_t i) { return int64_t{thw[streams[i]]}; });
    }
  }
};

}  // namespace

void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, const CpuActivations& x,
                     std::span<const StepPiece> pieces, std::span<const CpuKvCache> caches, CpuActivations& out) {
  const int64_t rows = x.rows();
  const int64_t hd = shape.head_dim, qh = shape.q_heads, kvh = shape.kv_heads;
  std::vector<float> q_gate(static_cast<size_t>(rows * qh * 2 * hd));  // [rows, q_heads, query | gate]
  std::vector<float> k(static_cast<size_t>(rows * kvh * hd));          // [rows, kv_heads, head_dim]
  std::vector<float> v(static_cast<size_t>(rows * kvh * hd));          // [rows, kv_heads, head_dim]
  project(x.values.data(), rows, w.q_proj, w.adapter.q_proj, pieces, q_gate.data());
  project(x.values.data(), rows, w.k_proj, w.adapter.k_proj, pieces, k.data());
  project(x.values.data(), rows, w.v_proj, w.adapter.v_proj, pieces, v.data());

  // Per row: norms, RoPE at the row's rotary position(s), then K and V go into the sequence's cache at its position.
  const float eps = static_cast<float>(shape.norm_eps);
  for (const StepPiece& piece : pieces)
    if (!piece.rope_positions.empty() && (piece.rope_positions.size() != static_cast<size_t>(3 * piece.rows) ||
                                          shape.rope_streams.size() != static_cast<size_t>(shape.rotary_dim / 2)))
      fail("cpu attention: a piece of {} rows with {} 3-D rotary positions, {} M-RoPE streams for {} rotary dims",
           piece.rows, piece.rope_positions.size(), shape.rope_streams.size(), shape.rotary_dim);
  std::vector<int64_t> row_piece(static_cast<size_t>(rows));
  for (size_t p = 0; p < pieces.size(); ++p)
    for (int64_t t = 0; t < pieces[p].rows; ++t) row_piece[pieces[p].first_row + t] = static_cast<int64_t>(p);
  global_thread_pool().parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const auto& piece = pieces[row_piece[r]];
      const int64_t t = static_cast<int64_t>(r) - piece.first_row;
      const int64_t position = piece.start_position + t;
      const RopeAt rope{.position = position + piece.rope_delta,
                        .thw = piece.rope_positions.empty() ? nullptr : piece.rope_positions.data() + 3 * t,
                        .streams = shape.rope_streams};
      for (int64_t h = 0; h < qh; ++h) {
        float* query = q_gate.data() + (r * qh + h) * 2 * hd;
        rms_norm_one_plus(query, hd, w.q_norm, eps, query);
        rope.apply(query, shape.rotary_dim, shape.rope_theta);
      }
      const CpuKvCache& cache = caches[row_piece[r]];
      for (int64_t h = 0; h < kvh; ++h) {
        float* key = k.data() + (r * kvh + h) * hd;
        rms_norm_one_plus(key, hd, w.k_norm, eps, key);
        rope.apply(key, shape.rotary_dim, shape.rope_theta);
        std::copy(key, key + hd, cache.key(position, h));
        const float* value = v.data() + (r * kvh + h) * hd;
        std::copy(value, value + hd, cache.value(position, h));
      }
    }
  });

  // Causal softmax attention, one task per (row, KV head): scores over positions [0, position] for each query head
  // of the group, then the group's weighted sums of values two heads at a time (each value row read once for both).
  // A head's arithmetic is the same whichever heads share its task.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t group = qh / kvh;
  std::vector<float> attended(static_cast<size_t>(rows * qh * hd));  // [rows, q_heads * head_dim]
  global_thread_pool().parallel_for(static_cast<size_t>(rows * kvh), [&](size_t begin, size_t end) {
    std::vector<float> weights;  // [group, position + 1]
    for (size_t task = begin; task < end; ++task) {
      const int64_t r = static_cast<int64_t>(task) / kvh, kv = static_cast<int64_t>(task) % kvh;
      const auto& piece = pieces[row_piece[r]];
      const CpuKvCache& cache = caches[row_piece[r]];
      const int64_t position = piece.start_position + (r - piece.first_row);
      const int64_t length = position + 1;
      // A page's keys (and values) lie kv_heads * head_dim floats apart: each page is one call.
      const int64_t stride = kvh * hd;
      weights.resize(static_cast<size_t>(group * length));
      for (int64_t g = 0; g < group; ++g) {
        const float* query = q_gate.data() + (r * qh + kv * group + g) * 2 * hd;
        float* p = weights.data() + g * length;
        for (int64_t first = 0; first < length; first += kKvPagePositions)
          dot_rows(query, cache.key(first, kv), stride, std::min(kKvPagePositions, length - first), hd, p + first);
        scaled_softmax(p, length, scale);
        float* o = attended.data() + (r * qh + kv * group + g) * hd;
        std::fill(o, o + hd, 0.0f);
      }
      for (int64_t g = 0; g < group; g += 2) {
        const float* p = weights.data() + g * length;
        float* o = attended.data() + (r * qh + kv * group + g) * hd;
        for (int64_t first = 0; first < length; first += kKvPagePositions) {
          const int64_t count = std::min(kKvPagePositions, length - first);
          if (g + 1 < group)
            accumulate_rows2(p + first, p + length + first, cache.value(first, kv), stride, count, hd, o, o + hd);
          else
            accumulate_rows(p + first, cache.value(first, kv), stride, count, hd, o);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        const float* gate = q_gate.data() + (r * qh + kv * group + g) * 2 * hd + hd;
        float* o = attended.data() + (r * qh + kv * group + g) * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] *= sigmoid(gate[i]);
      }
    }
  });
  project(attended.data(), rows, w.o_proj, w.adapter.o_proj, pieces, out.values.data());
}

}  // namespace duet::backend::cpu
