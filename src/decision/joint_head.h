#pragma once
// The Clef joint schema head (../shared/spec/systemone.md), loaded from joint_head.safetensors and
// joint_head_config.json and run in fp32 on the host. Shapes: h hidden, w width, f feedforward; L prompt rows,
// Q questions, N options of all questions. Matrices stay as stored (BF16 views into the mapped file, widened to
// fp32 as they are read; F32 files are read as they are); vectors are fp32 copies.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "decision/head_config.h"

namespace duet::decision {

struct LayerNormWeights {
  std::vector<float> weight;  // [n]
  std::vector<float> bias;    // [n]
};

struct LinearWeights {
  backend::Weight weight;   // [out, in]
  std::vector<float> bias;  // [out], empty when the layer has none
};

// torch.nn.MultiheadAttention: packed in-projection rows q | k | v with biases, then the out projection.
struct AttentionWeights {
  LinearWeights query, key, value;  // [w, w] each
  LinearWeights out;                // [w, w]
};

struct EvidenceLayerWeights {  // evidence_layers.{i}: options attend to the prompt's memory
  LayerNormWeights query_norm, memory_norm, feedforward_norm;
  AttentionWeights attention;
  LinearWeights feedforward_in;   // feedforward.0 [f, w]
  LinearWeights feedforward_out;  // feedforward.3 [w, f]
};

struct DecoderLayerWeights {         // layers.{j}: torch.nn.TransformerDecoderLayer, pre-norm
  AttentionWeights self_attention;   // self_attn
  AttentionWeights cross_attention;  // multihead_attn
  LinearWeights linear1;             // [f, w]
  LinearWeights linear2;             // [w, f]
  LayerNormWeights norm1, norm2, norm3;
};

struct JointHeadWeights {
  LayerNormWeights hidden_norm;                                 // [h]
  LinearWeights memory, question, option_question, global_row;  // *_projection [w, h], no bias
  LinearWeights option_context, option_lexical;                 // [w, h], no bias
  std::vector<float> type_embedding;                            // [3, w]: noul, choice, score
  std::vector<EvidenceLayerWeights> evidence_layers;
  LayerNormWeights option_summary_norm;  // [w]
  std::vector<DecoderLayerWeights> layers;
  LayerNormWeights field_norm, option_norm;  // [w]
  LinearWeights scorer_in;                   // residual_scorer.0 [w, 4w]
  LinearWeights scorer_out;                  // residual_scorer.3 [1, w]
  float prior_logit_scale = 0;               // alpha
  float joint_logit_scale = 0;               // beta
  float residual_gate = 0;                   // gamma
};

// What the head reads of one request: gathered by HeadInputGatherer as the prompt's prefill advances.
struct HeadInputs {
  int64_t rows = 0;                     // L
  std::vector<float> memory;            // [L, w] M = LN_hidden(H) W_mem^T
  std::vector<float> question_means;    // [Q, h] q_i: mean of LN_hidden(H) over question span i
  std::vector<float> option_means;      // [N, h] c_r: the same over option span r
  std::vector<float> lexical_means;     // [N, h] l_r: mean of lm_head rows of the option span's ids
  std::vector<float> last_row;          // [h] g = LN_hidden(H)[L - 1]
  std::vector<int32_t> owner;           // [N] the question of each option
  std::vector<int32_t> question_types;  // [Q] type ids
};

// Per option, in encoding order (question by question): the head's logit and its two terms.
struct HeadOutput {
  std::vector<float> logits;  // prior + sigmoid(gamma) * joint
  std::vector<float> prior;
  std::vector<float> joint;
};

class JointHead {
 public:
  // True when `model_dir` holds joint_head.safetensors and joint_head_config.json; false when it holds neither;
  // refuses a folder with only one of them.
  static bool present(const std::string& model_dir);
  // Loads and checks both files: the config's keys, every tensor's name, dtype (bf16 or f32) and shape, no tensor
  // the spec does not list, and hidden_size equal to the backbone's `backbone_hidden` (when not 0). Throws
  // duet::Error naming the file and the tensor.
  static std::unique_ptr<JointHead> load(const std::string& model_dir, int64_t backbone_hidden = 0);

  const JointHeadConfig& config() const { return config_; }
  size_t weight_bytes() const;  // as stored
  // What the head takes on a GPU backend: every tensor in fp32 (the device head, decision/cuda, or the host head's
  // products, Backend::host_products, which keep the linears there after their first use), and, per prompt
  // position, the larger of the host products' rows in and out and the device head's memory rows and their work.
  struct ProductMemory {
    size_t weight_bytes = 0;
    size_t bytes_per_position = 0;
  };
  ProductMemory product_memory() const;
  const JointHeadWeights& weights() const { return weights_; }
  // Every tensor the spec lists, with its shape: the head's names.
  static std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const JointHeadConfig& config);

  // The head on one request's inputs (forward in head_forward.cc). Callable from several threads at once (the
  // engine's decision workers): it writes nothing shared; its parallel loops take turns on the global thread pool,
  // whose split of a loop depends on the loop's size alone, and host products serialize inside the backend. So the
  // result's bytes do not depend on what runs beside it.
  HeadOutput forward(const HeadInputs& inputs) const;

 private:
  JointHead(JointHeadConfig config, checkpoint::Checkpoint file);

  JointHeadConfig config_;
  checkpoint::Checkpoint file_;  // owns the mapping the weights point into
  JointHeadWeights weights_;
};

}  // namespace duet::decision
