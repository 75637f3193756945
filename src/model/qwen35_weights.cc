#include "model/qwen35_weights.h"

#include <fmt/format.h>

#include "base/error.h"
#include "model/mrope.h"
#include "model/weight_binder.h"

namespace duet::model {

namespace {

std::string layer_types_text(const Qwen35Config& c) {
  std::string text;
  for (auto t : c.layer_types) text += t == LayerType::full_attention ? 'F' : 'L';
  return text;
}

}  // namespace

backend::GdnShape gdn_shape(const Qwen35Config& c) {
  return backend::GdnShape{c.hidden_size,         c.linear_num_key_heads,  c.linear_num_value_heads,
                           c.linear_key_head_dim, c.linear_value_head_dim, c.linear_conv_kernel_dim,
                           c.rms_norm_eps};
}

namespace {

// The M-RoPE streams of the config's mrope_section (model/mrope.h). A text-only checkpoint may carry no section, or one
// that does not fit: it loads as before, and a piece with 3-D positions is refused (model/piece_checks.h).
std::vector<int32_t> rope_streams(const Qwen35Config& c) {
  if (c.mrope_section.size() != 3) return {};
  try {
    return mrope_streams(c.rotary_dim(), c.mrope_section);
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

backend::AttentionShape attention_shape(const Qwen35Config& c) {
  return backend::AttentionShape{.hidden = c.hidden_size,
                                 .q_heads = c.num_attention_heads,
                                 .kv_heads = c.num_key_value_heads,
                                 .head_dim = c.head_dim,
                                 .rotary_dim = c.rotary_dim(),
                                 .rope_theta = c.rope_theta,
                                 .norm_eps = c.rms_norm_eps,
                                 .rope_streams = rope_streams(c)};
}

Qwen35Weights bind_qwen35_weights(const checkpoint::Checkpoint& checkpoint, const Qwen35Config& c) {
  Qwen35Weights w;
  if (checkpoint.contains("model.language_model.embed_tokens.weight")) {
    w.prefix = "model.language_model.";
  } else if (checkpoint.contains("model.embed_tokens.weight")) {
    w.prefix = "model.";
  } else {
    fail(
        "{}: missing tensor model.language_model.embed_tokens.weight (multimodal layout) or "
        "model.embed_tokens.weight (text-only layout)",
        checkpoint.source());
  }
  WeightBinder bind(checkpoint, w.bytes);
  const int64_t h = c.hidden_size, V = c.vocab_size;
  const std::string& p = w.prefix;
  w.embed_tokens = bind.bf16(p + "embed_tokens.weight", {V, h});
  w.final_norm = bind.bf16(p + "norm.weight", {h});
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : bind.bf16("lm_head.weight", {V, h});

  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    w.layers.push_back(bind_decoder_layer(bind, fmt::format("{}layers.{}.", p, i), c.layer_types[i], c));

  // A text-model tensor nobody bound means the config and the checkpoint disagree (say, more layers stored than
  // configured): refuse rather than silently run part of the model. Vision tensors are not ours; mtp.* are
  // bound, or ignored, by bind_mtp_weights (model/mtp_weights.h).
  for (const auto& name : checkpoint.names()) {
    if (name.rfind(p, 0) != 0 || name.rfind("model.visual.", 0) == 0 || bind.bound(name)) continue;
    fail("{}: {}: not used by this config ({} layers, layer_types {}): config and checkpoint disagree",
         *checkpoint.find(name)->file, name, c.num_hidden_layers, layer_types_text(c));
  }
  return w;
}

}  // namespace duet::model
