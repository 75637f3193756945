#pragma once
// The checkpoint's multi-token-prediction layer (`mtp.*`, issue 20; the math in tools/qwen35_mtp_spec.md): two
// pre-norms, the fusion projection fc, one full-attention decoder layer and a final norm. It shares embed_tokens
// and lm_head with the main model, so neither is stored again.
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "model/qwen35_config.h"
#include "model/qwen35_weights.h"

namespace duet::model {

struct MtpWeights {
  backend::Weight pre_fc_norm_embedding;  // [h] (1 + w), on embed_tokens[x_{j+1}]
  backend::Weight pre_fc_norm_hidden;     // [h] (1 + w), on the main model's final-norm row h_j
  backend::Weight fc;                     // [h, 2h]: columns [0, h) take the embedding half, [h, 2h) the hidden half
  Qwen35LayerWeights layer;               // mtp.layers.0, a full_attention layer
  backend::Weight norm;                   // [h] (1 + w), before the shared lm_head
  size_t bytes = 0;                       // stored bytes of the tensors above
};

// The MTP layer when the config declares one (mtp_num_hidden_layers) and the checkpoint stores it (mtp.fc.weight),
// every tensor checked like the main model's. Absent (nullopt, with a log line saying why) when the config declares
// none, when the checkpoint carries none (conversions often strip them), or for a layout duet does not run (more
// than one MTP layer, dedicated embeddings): the main model loads and serves the same either way. Refuses a
// declared layer that is stored in part, in the wrong shape or dtype, or with mtp.* tensors it does not use.
std::optional<MtpWeights> bind_mtp_weights(const checkpoint::Checkpoint& checkpoint, const Qwen35Config& config);

}  // namespace duet::model
