#pragma once
// The CPU backend's per-sequence, per-layer state and activations, all fp32.
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/delta_rule.h"

namespace duet::backend::cpu {

class CpuActivations final : public Activations {
 public:
  CpuActivations(int64_t rows, int64_t width)
      : Activations(rows, width), values(static_cast<size_t>(rows * width), 0.0f) {}
  float* row(int64_t r) { return values.data() + r * width(); }
  const float* row(int64_t r) const { return values.data() + r * width(); }
  std::vector<float> values;  // [rows, width]
};

// A GDN layer's state: conv history and the chunked delta-rule state of every value head.
class CpuGdnState final : public LayerState {
 public:
  explicit CpuGdnState(const GdnShape& shape);
  static size_t bytes_for(const GdnShape& shape);
  size_t bytes() const override { return bytes_for(shape); }
  void reset() override;
  DeltaRuleHead head(int64_t value_head);

  GdnShape shape;
  std::vector<float> conv_history;     // [conv_kernel - 1, channels]: the last pre-conv inputs, oldest first
  std::vector<float> boundary_states;  // [value_heads, key_dim, value_dim]
  std::vector<float> chunk_keys;       // [value_heads, 64, key_dim]
  std::vector<float> chunk_cum_decay;  // [value_heads, 64]
  std::vector<float> chunk_values;     // [value_heads, 64, value_dim]
  int64_t position = 0;                // tokens consumed; position % 64 rows of the current chunk are filled
};

// An attention layer's KV cache: post-norm, post-RoPE keys and values.
class CpuKvCache final : public LayerState {
 public:
  CpuKvCache(const AttentionShape& shape, int64_t max_positions);
  static size_t bytes_for(const AttentionShape& shape, int64_t max_positions);
  size_t bytes() const override { return bytes_for(shape, max_positions); }
  void reset() override { position = 0; }
  float* key(int64_t pos, int64_t kv_head) { return keys.data() + (pos * shape.kv_heads + kv_head) * shape.head_dim; }
  float* value(int64_t pos, int64_t kv_head) {
    return values.data() + (pos * shape.kv_heads + kv_head) * shape.head_dim;
  }

  AttentionShape shape;
  int64_t max_positions;
  std::vector<float> keys;    // [max_positions, kv_heads, head_dim]
  std::vector<float> values;  // [max_positions, kv_heads, head_dim]
  int64_t position = 0;       // positions written
};

}  // namespace duet::backend::cpu
