#include "model/weight_binder.h"

namespace duet::model {

using checkpoint::DType;

backend::Weight WeightBinder::bind(const std::string& name, const std::vector<int64_t>& shape, bool f32_allowed) {
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

Qwen35LayerWeights bind_decoder_layer(WeightBinder& bind, const std::string& l, LayerType type, const Qwen35Config& c) {
  const int64_t h = c.hidden_size, F = c.intermediate_size;
  const int64_t d = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t dv = c.linear_value_head_dim, Hv = c.linear_num_value_heads;
  Qwen35LayerWeights layer;
  layer.type = type;
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
  return layer;
}

}  // namespace duet::model
