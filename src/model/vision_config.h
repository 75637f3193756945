#pragma once
// The vision tower's hyperparameters (docs/vision.md 1), read from a multimodal Qwen3.5 config.json's
// `vision_config`, and the image token ids from its top level. The sizes are required; the layout keys whose value is
// the same in every Qwen3.5 release (patch 16, temporal patch 2, merge 2, 3 channels, gelu_pytorch_tanh) fall back to
// transformers' class defaults, because save_pretrained leaves keys equal to the defaults out of nested configs.
#include <cstdint>
#include <string>

namespace duet::model {

struct VisionConfig {
  int64_t depth = 0;                    // vision blocks
  int64_t hidden_size = 0;              // tower width
  int64_t num_heads = 0;                // attention heads; head_dim = hidden_size / num_heads
  int64_t intermediate_size = 0;        // block MLP width
  int64_t out_hidden_size = 0;          // merger output = the language model's hidden_size
  int64_t num_position_embeddings = 0;  // learned position table, a square grid
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t in_channels = 3;
  std::string hidden_act = "gelu_pytorch_tanh";  // the blocks' MLP activation (the only one implemented)
  double rope_theta = 10000.0;                   // the 2-D rotary base
  float layer_norm_eps = 1e-6f;                  // every LayerNorm of the tower (fixed in transformers' code)

  // Top-level token ids (transformers' defaults when absent).
  int64_t image_token_id = 248056;
  int64_t video_token_id = 248057;
  int64_t vision_start_token_id = 248053;
  int64_t vision_end_token_id = 248054;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t grid_side() const;  // sqrt(num_position_embeddings)
  int64_t patch_row_size() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t merge_group() const { return spatial_merge_size * spatial_merge_size; }  // patches per image token
  int64_t merged_size() const { return hidden_size * merge_group(); }              // merger input width

  // Parses config.json text (the multimodal layout: `vision_config` beside `text_config`); `source` names the file
  // in messages. Refuses missing or inconsistent keys by name (duet::Error).
  static VisionConfig parse(const std::string& json_text, const std::string& source);
  static VisionConfig load(const std::string& config_path);
  // Whether config.json text carries a `vision_config` object.
  static bool present(const std::string& json_text);
};

}  // namespace duet::model
