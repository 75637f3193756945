#include "model/vision_weights.h"

#include "model/weight_binder.h"

namespace duet::model {

namespace {

VisionLinear linear(WeightBinder& bind, const std::string& name, int64_t out, int64_t in) {
  return {bind.bf16_or_f32(name + ".weight", {out, in}), bind.bf16_or_f32(name + ".bias", {out})};
}

VisionLayerNorm layer_norm(WeightBinder& bind, const std::string& name, int64_t width) {
  return {bind.bf16_or_f32(name + ".weight", {width}), bind.bf16_or_f32(name + ".bias", {width})};
}

}  // namespace

VisionWeights bind_vision_weights(WeightBinder& bind, const VisionConfig& c, const std::string& prefix) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, m = c.merged_size();
  VisionWeights w;
  const std::string pe = prefix + "patch_embed.proj.";
  w.patch_embed.weight =
      bind.bf16_or_f32(pe + "weight", {h, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size});
  w.patch_embed.bias = bind.bf16_or_f32(pe + "bias", {h});
  w.pos_embed = bind.bf16_or_f32(prefix + "pos_embed.weight", {c.num_position_embeddings, h});
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string b = prefix + "blocks." + std::to_string(i) + ".";
    VisionBlockWeights block;
    block.norm1 = layer_norm(bind, b + "norm1", h);
    block.norm2 = layer_norm(bind, b + "norm2", h);
    block.qkv = linear(bind, b + "attn.qkv", 3 * h, h);
    block.proj = linear(bind, b + "attn.proj", h, h);
    block.fc1 = linear(bind, b + "mlp.linear_fc1", f, h);
    block.fc2 = linear(bind, b + "mlp.linear_fc2", h, f);
    w.blocks.push_back(block);
  }
  w.merger_norm = layer_norm(bind, prefix + "merger.norm", h);
  w.merger_fc1 = linear(bind, prefix + "merger.linear_fc1", m, m);
  w.merger_fc2 = linear(bind, prefix + "merger.linear_fc2", c.out_hidden_size, m);
  return w;
}

}  // namespace duet::model
