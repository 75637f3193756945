#pragma once
// Qwen3.5 weights bound by name: views into the checkpoint's mapped files, each checked for dtype and shape before
// anything is built. Shapes use the config's names: h hidden, V vocab, F ffn, Hq/Hkv attention heads of d,
// Hk/Hv GDN key/value heads of dk/dv, K conv kernel.
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/qwen35_config.h"

namespace duet::model {

struct Qwen35LayerWeights {
  LayerType type = LayerType::linear_attention;
  backend::Weight input_layernorm;           // [h] (1 + w)
  backend::Weight post_attention_layernorm;  // [h] (1 + w)
  backend::GdnWeights gdn;                   // linear_attention layers
  backend::AttentionWeights attention;       // full_attention layers
  backend::MlpWeights mlp;
};

struct Qwen35Weights {
  std::string prefix;            // "model.language_model." (multimodal layout) or "model." (text-only)
  backend::Weight embed_tokens;  // [V, h]
  backend::Weight final_norm;    // [h] (1 + w)
  backend::Weight lm_head;       // [V, h]; embed_tokens when tied
  std::vector<Qwen35LayerWeights> layers;
  size_t bytes = 0;  // stored bytes of every bound tensor (a tied head counted once)
};

// Binds every tensor the model uses. Refuses a missing tensor, a wrong dtype or a wrong shape with the file and
// tensor name; model.visual.* is ignored, mtp.* left to bind_mtp_weights (model/mtp_weights.h).
Qwen35Weights bind_qwen35_weights(const checkpoint::Checkpoint& checkpoint, const Qwen35Config& config);

backend::GdnShape gdn_shape(const Qwen35Config& config);
backend::AttentionShape attention_shape(const Qwen35Config& config);

}  // namespace duet::model
