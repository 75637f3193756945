#pragma once
// Binding checkpoint tensors by name, shared by the main model's weights (qwen35_weights.cc) and the MTP layer's
// (mtp_weights.cc): each tensor checked for dtype and shape, its bytes counted, its name remembered so that the
// caller can refuse tensors nobody bound.
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/qwen35_config.h"
#include "model/qwen35_weights.h"

namespace duet::model {

class WeightBinder {
 public:
  // `bytes` grows by the stored size of every tensor bound.
  WeightBinder(const checkpoint::Checkpoint& checkpoint, size_t& bytes) : checkpoint_(checkpoint), bytes_(bytes) {}

  // BF16, the dtype of every matrix and most vectors.
  backend::Weight bf16(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, false); }
  // BF16 or F32: linear_attn.A_log and linear_attn.norm.weight, which stock checkpoints keep in F32.
  backend::Weight bf16_or_f32(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, true); }
  bool bound(const std::string& name) const { return bound_.count(name) != 0; }

 private:
  backend::Weight bind(const std::string& name, const std::vector<int64_t>& shape, bool f32_allowed);

  const checkpoint::Checkpoint& checkpoint_;
  size_t& bytes_;
  std::set<std::string> bound_;
};

// One decoder layer whose tensors are named `prefix` + input_layernorm.weight, self_attn.* or linear_attn.*,
// mlp.*: a main layer (prefix "model.layers.3.") or an MTP layer ("mtp.layers.0.", always full attention).
Qwen35LayerWeights bind_decoder_layer(WeightBinder& bind, const std::string& prefix, LayerType type,
                                      const Qwen35Config& config);

}  // namespace duet::model
