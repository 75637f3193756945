#include "model/mtp_weights.h"

#include "base/error.h"
#include "base/log.h"
#include "model/weight_binder.h"

namespace duet::model {

std::optional<MtpWeights> bind_mtp_weights(const checkpoint::Checkpoint& checkpoint, const Qwen35Config& c) {
  const std::string prefix = "mtp.";
  if (c.mtp_num_hidden_layers == 0) return std::nullopt;  // what every checkpoint without MTP says (or omits)
  if (!checkpoint.contains(prefix + "fc.weight")) {
    log_info("{}: the config declares {} MTP layer(s), the checkpoint stores none: loaded without MTP",
             checkpoint.source(), c.mtp_num_hidden_layers);
    return std::nullopt;
  }
  // Every release has one shared-embedding layer; anything else would need its own forward, so it runs without.
  if (c.mtp_num_hidden_layers != 1 || c.mtp_use_dedicated_embeddings) {
    log_info("{}: MTP with {} layer(s){} is not supported: loaded without MTP", checkpoint.source(),
             c.mtp_num_hidden_layers, c.mtp_use_dedicated_embeddings ? " and dedicated embeddings" : "");
    return std::nullopt;
  }
  MtpWeights w;
  WeightBinder bind(checkpoint, w.bytes);
  const int64_t h = c.hidden_size;
  w.pre_fc_norm_embedding = bind.bf16(prefix + "pre_fc_norm_embedding.weight", {h});
  w.pre_fc_norm_hidden = bind.bf16(prefix + "pre_fc_norm_hidden.weight", {h});
  w.fc = bind.bf16(prefix + "fc.weight", {h, 2 * h});
  w.layer = bind_decoder_layer(bind, prefix + "layers.0.", LayerType::full_attention, c);
  w.norm = bind.bf16(prefix + "norm.weight", {h});
  for (const auto& name : checkpoint.names())
    if (name.rfind(prefix, 0) == 0 && !bind.bound(name))
      fail("{}: {}: not part of the MTP layer the config declares (1 layer): config and checkpoint disagree",
           *checkpoint.find(name)->file, name);
  return w;
}

}  // namespace duet::model
