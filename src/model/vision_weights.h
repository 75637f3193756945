#pragma once
// The vision tower's tensors (`model.visual.*`, docs/vision.md 1), bound by name with their shapes. Every tensor is
// BF16 or F32 as stored; the CPU forward reads them as fp32 (exact for both).
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/vision_config.h"

namespace duet::model {

class WeightBinder;

struct VisionLinear {
  backend::Weight weight;  // [out, in]
  backend::Weight bias;    // [out]
};

struct VisionLayerNorm {
  backend::Weight weight;  // [width], plain w (not 1 + w)
  backend::Weight bias;    // [width]
};

struct VisionBlockWeights {
  VisionLayerNorm norm1, norm2;  // [hidden]
  VisionLinear qkv;              // [3 * hidden, hidden], rows [q | k | v], each head-major
  VisionLinear proj;             // [hidden, hidden]
  VisionLinear fc1;              // [intermediate, hidden]
  VisionLinear fc2;              // [hidden, intermediate]
};

struct VisionWeights {
  VisionLinear patch_embed;                // Conv3d [hidden, C, T, P, P] seen as [hidden, C*T*P*P] (kernel = stride)
  backend::Weight pos_embed;               // [num_position_embeddings, hidden], a G x G grid, row-major
  std::vector<VisionBlockWeights> blocks;  // [depth]
  VisionLayerNorm merger_norm;             // [hidden], per patch, before the 2x2 grouping
  VisionLinear merger_fc1;                 // [4 * hidden, 4 * hidden]
  VisionLinear merger_fc2;                 // [out_hidden_size, 4 * hidden]
};

// Binds `prefix` + patch_embed.*, pos_embed.*, blocks.N.*, merger.* (prefix "model.visual." in the stock layout).
VisionWeights bind_vision_weights(WeightBinder& bind, const VisionConfig& config,
                                  const std::string& prefix = "model.visual.");

}  // namespace duet::model
