#include "model/qwen35_weights.h"

#include <fmt/format.h>

#include <set>

#include "base/error.h"

namespace duet::model {

namespace {

using checkpoint::DType;

// Binds tensors under one prefix, adding up their bytes.
class Binder {
 public:
  Binder(const checkpoint::Checkpoint& checkpoint, size_t& bytes) : checkpoint_(checkpoint), bytes_(bytes) {}

  // BF16, the dtype of every matrix and most vectors.
  backend::Weight bf16(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, false); }
  // BF16 or F32: linear_attn.A_log and linear_attn.norm.weight, which stock checkpoints keep in F32.
  backend::Weight bf16_or_f32(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, true); }

 private:
  backend::Weight bind(const std::string& name, const std::vector<int64_t>& shape, bool f32_allowed) {
    const auto& t = f32_allowed ? checkpoint_.require(name, {DType::bf16, DType::f32}, shape)
                                : checkpoint_.require(name, {DType::bf16}, shape);
    backend::Weight w;
    w.type = t.dtype == DType::f32 ? backend::WeightType::f32 : backend::WeightType::bf16;
    w.data = t.bytes.data();
    w.rows = shape.size() == 1 ? 1 : shape[0];
    w.cols = t.element_count() / w.rows;
    bytes_ += t.bytes.size();
    bound_.insert(name);
    return w;
  }

 public:
  bool bound(const std::string& name) const { return bound_.count(name) != 0; }

 private:
  const checkpoint::Checkpoint& checkpoint_;
  size_t& bytes_;
  std::set<std::string> bound_;
};

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

backend::AttentionShape attention_shape(const Qwen35Config& c) {
  return backend::AttentionShape{c.hidden_size,  c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                 c.rotary_dim(), c.rope_theta,          c.rms_norm_eps};
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
  Binder bind(checkpoint, w.bytes);
  const int64_t h = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const std::string& p = w.prefix;
  w.embed_tokens = bind.bf16(p + "embed_tokens.weight", {V, h});
  w.final_norm = bind.bf16(p + "norm.weight", {h});
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : bind.bf16("lm_head.weight", {V, h});

  const int64_t d = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t dv = c.linear_value_head_dim, Hv = c.linear_num_value_heads;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = fmt::format("{}layers.{}.", p, i);
    Qwen35LayerWeights layer;
    layer.type = c.layer_types[i];
    layer.input_layernorm = bind.bf16(l + "input_layernorm.weight", {h});
    layer.post_attention_layernorm = bind.bf16(l + "post_attention_layernorm.weight", {h});
    if (layer.type == LayerType::linear_attention) {
      const std::string g = l + "linear_attn.";
      auto& gdn = layer.gdn;
      gdn.in_proj_qkv = bind.bf16(g + "in_proj_qkv.weight", {c.gdn_conv_dim(), h});
      gdn.in_proj_z = bind.bf16(g + "in_proj_z.weight", {c.gdn_value_dim(), h});
      gdn.in_proj_b = bind.bf16(g + "in_proj_b.weight", {Hv, h});
      gdn.in_proj_a = bind.bf16(g + "in_proj_a.weight", {Hv, h});
      gdn.conv1d = bind.bf16(g + "conv1d.weight", {c.gdn_conv_dim(), 1, c.linear_conv_kernel_dim});
      gdn.A_log = bind.bf16_or_f32(g + "A_log", {Hv});
      gdn.dt_bias = bind.bf16(g + "dt_bias", {Hv});
      gdn.norm = bind.bf16_or_f32(g + "norm.weight", {dv});
      gdn.out_proj = bind.bf16(g + "out_proj.weight", {h, c.gdn_value_dim()});
    } else {
      const std::string a = l + "self_attn.";
      auto& att = layer.attention;
      att.q_proj = bind.bf16(a + "q_proj.weight", {Hq * 2 * d, h});
      att.k_proj = bind.bf16(a + "k_proj.weight", {Hkv * d, h});
      att.v_proj = bind.bf16(a + "v_proj.weight", {Hkv * d, h});
      att.o_proj = bind.bf16(a + "o_proj.weight", {h, Hq * d});
      att.q_norm = bind.bf16(a + "q_norm.weight", {d});
      att.k_norm = bind.bf16(a + "k_norm.weight", {d});
    }
    layer.mlp.gate_proj = bind.bf16(l + "mlp.gate_proj.weight", {F, h});
    layer.mlp.up_proj = bind.bf16(l + "mlp.up_proj.weight", {F, h});
    layer.mlp.down_proj = bind.bf16(l + "mlp.down_proj.weight", {h, F});
    w.layers.push_back(layer);
  }

  // A text-model tensor nobody bound means the config and the checkpoint disagree (say, more layers stored than
  // configured): refuse rather than silently run part of the model. Vision and MTP tensors are not ours.
  for (const auto& name : checkpoint.names()) {
    if (name.rfind(p, 0) != 0 || name.rfind("model.visual.", 0) == 0 || bind.bound(name)) continue;
    fail("{}: {}: not used by this config ({} layers, layer_types {}): config and checkpoint disagree",
         *checkpoint.find(name)->file, name, c.num_hidden_layers, layer_types_text(c));
  }
  return w;
}

}  // namespace duet::model
