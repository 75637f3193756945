#pragma once
// The Qwen3.5 text model's hyperparameters, read from a Hugging Face config.json: either the multimodal
// `qwen3_5` (the text model under `text_config`) or a text-only `qwen3_5_text` at the top level. Every value the
// forward pass uses comes from here; nothing is hard-coded for a model size.
#include <cstdint>
#include <string>
#include <vector>

namespace duet::model {

enum class LayerType : uint8_t { linear_attention, full_attention };  // GDN mixer, gated softmax attention

struct Qwen35Config {
  std::string model_type;  // the top-level model_type: "qwen3_5" or "qwen3_5_text"
  bool nested = false;     // the text model came from text_config

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // SwiGLU MLP width
  int64_t num_hidden_layers = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;  // lm_head is embed_tokens
  int64_t max_position_embeddings = 0;
  std::vector<LayerType> layer_types;  // [num_hidden_layers]

  // Full attention.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  std::string rope_type = "default";  // "default" (or "mrope", which is plain 1-D RoPE for text)
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.25;
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;
  // <|image_pad|>, whose embedding rows an image's replace (the multimodal config's top level; transformers' default
  // 248056 when absent there); -1 for a text-only config.
  int64_t image_token_id = -1;
  // The multimodal config has a `vision_config`: the checkpoint carries a vision tower (model/vision_model.h).
  bool has_vision_tower = false;

  // Gated DeltaNet.
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;

  // Multi-token prediction (the `mtp.*` layer, model/mtp_weights.h): decoder layers the checkpoint says it ships,
  // 0 when the config does not say. They share embed_tokens and lm_head unless dedicated embeddings are declared.
  int64_t mtp_num_hidden_layers = 0;
  bool mtp_use_dedicated_embeddings = false;

  // Special tokens (may be absent).
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  int64_t pad_token_id = -1;

  // Derived sizes.
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }
  int64_t gdn_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }        // q and k widths
  int64_t gdn_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }  // v and z widths
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }              // [q | k | v]
  int64_t layer_count(LayerType type) const;

  // Parses and checks config.json text; `source` names the file in messages. Throws duet::Error.
  static Qwen35Config parse(const std::string& json_text, const std::string& source);
  static Qwen35Config load(const std::string& config_path);
};

std::string_view layer_type_name(LayerType type);

}  // namespace duet::model
