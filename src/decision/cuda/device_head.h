#pragma once
// The joint head on the GPU (issue 17): a decision's final-norm rows never leave the device. As each prefill chunk
// finishes, its rows (still in the step's activations) are normalised, projected into the decision's memory
// M = LN_hidden(H) W_mem^T and summed over the question and option spans, on the step's stream; after the last
// chunk the whole head (decision/head_forward.cc, step by step) runs on a stream of the decision's own, on a
// decision worker, and only the options' logits come back. Every product is launch_fp32_gemm (each output one fma
// chain over k in order, as the host head's products on this backend), every sum the host takes in double is
// taken in double: the device head equals the host head within fp32 rounding, and a decision's bytes never depend
// on what else runs.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "decision/encoder.h"
#include "decision/head_inputs.h"
#include "decision/joint_head.h"
#include "engine/decision_sink.h"
#include "model/model.h"

namespace duet::decision::cuda {

struct DeviceLinear {
  const float* weight = nullptr;  // [out, in]
  const float* bias = nullptr;    // [out] or null
  int32_t in = 0, out = 0;
};
struct DeviceLayerNorm {
  const float* weight = nullptr;
  const float* bias = nullptr;
};
struct DeviceAttention {
  DeviceLinear query, key, value, out;
};
struct DeviceEvidenceLayer {
  DeviceLayerNorm query_norm, memory_norm, feedforward_norm;
  DeviceAttention attention;
  DeviceLinear feedforward_in, feedforward_out;
};
struct DeviceDecoderLayer {
  DeviceAttention self_attention, cross_attention;
  DeviceLinear linear1, linear2;
  DeviceLayerNorm norm1, norm2, norm3;
};
struct DeviceHeadWeights {
  DeviceLayerNorm hidden_norm;
  DeviceLinear memory, question, option_question, global_row, option_context, option_lexical;
  const float* type_embedding = nullptr;  // [3, w]
  std::vector<DeviceEvidenceLayer> evidence_layers;
  DeviceLayerNorm option_summary_norm;
  std::vector<DeviceDecoderLayer> layers;
  DeviceLayerNorm field_norm, option_norm;
  DeviceLinear scorer_in, scorer_out;
};

// The head's weights on the device, every tensor in fp32 (BF16 widened exactly), uploaded once at start; shared by
// every decision's sink.
class DeviceJointHead {
 public:
  DeviceJointHead(std::shared_ptr<const JointHead> head, const model::Model& backbone);
  ~DeviceJointHead();
  DeviceJointHead(const DeviceJointHead&) = delete;
  DeviceJointHead& operator=(const DeviceJointHead&) = delete;

  // A sink for one decision: give it to engine::Request::decision.
  std::shared_ptr<engine::DecisionSink> new_sink(const Encoding& encoding) const;

  const JointHead& head() const { return *head_; }
  const DeviceHeadWeights& weights() const { return weights_; }
  size_t device_bytes() const { return bytes_; }

 private:
  std::shared_ptr<const JointHead> head_;
  const model::Model& backbone_;
  void* memory_ = nullptr;  // every tensor, 256-byte aligned, in one allocation
  size_t bytes_ = 0;
  DeviceHeadWeights weights_;
};

class DeviceDecisionPrefix;

// How the head's attentions over the memory rows (the routing layers' and the decoder's cross-attention) take their
// keys and values. Unfolded: every memory row projected, K = M W_k^T + b_k and V = M W_v^T + b_v (2 nm w^2
// multiply-adds), then launch_attention. Folded (head_kernels.h, launch_folded_attention): the projections moved onto
// the queries, about 2 nq heads nm w. The rule (by_cost): fold when nq * heads < w (for the gate's head, 16 heads of
// 64: fewer than 64 queries), i.e. the decoder's questions, and routing only with fewer than 64 options. The decoder's
// self-attention (nm = nq) is never folded. The two paths differ by fp32 rounding only.
enum class AttentionFold {
  by_cost,                    // the default
  never,                      // DUET_HEAD_FOLD=0: every memory row projected, as before the fold
  always,                     // DUET_HEAD_FOLD=1: folded whatever nq (measurements)
  always_without_value_bias,  // tests only, a planted fault: folded with the value bias left out
};
// DUET_HEAD_FOLD: 0 never, 1 always; unset or anything else by_cost.
AttentionFold attention_fold_from_env();
bool attention_folds(AttentionFold fold, int64_t queries, int64_t heads, int64_t width);

// One decision on the device: an engine::DecisionSink whose rows the model hands over on the device
// (device_rows()), and whose finish() runs the head there.
class DeviceHeadSink final : public engine::DecisionSink, public backend::RowConsumer {
 public:
  DeviceHeadSink(const DeviceJointHead& head, SpanLayout layout, std::unique_ptr<HeadInputGatherer> check = nullptr);
  ~DeviceHeadSink() override;
  DeviceHeadSink(const DeviceHeadSink&) = delete;
  DeviceHeadSink& operator=(const DeviceHeadSink&) = delete;

  // RowConsumer, on the engine thread during a step: the chunk's BF16 rows, in position order.
  void take_rows(backend::Backend& backend, const backend::Activations& x, int64_t first_row, int64_t count) override;
  // The same from fp32 rows [count, h] already on the device (tests, tools), ordered on `stream`; overwrites them.
  void take_f32_rows(float* rows, int64_t count, cudaStream_t stream);

  void add_rows(int64_t first, int64_t count,
                std::span<const float> rows) override;  // refused: rows come on the device
  std::vector<float> finish() override { return run().logits; }
  backend::RowConsumer* device_rows() override { return this; }

  // The prompt cache: a prefix before the first span is its memory rows alone, kept on the device
  // (DeviceDecisionPrefix). Not with DUET_HEAD_CHECK, whose host head would need the rows too.
  int64_t prefix_limit() const override { return check_ ? 0 : layout_.first_span; }
  std::shared_ptr<const engine::DecisionPrefix> keep_prefix(int64_t positions) override;
  void resume_from(std::shared_ptr<const engine::DecisionPrefix> prefix) override;

  // The head's logits with the prior and joint terms (finish() keeps the logits). Once, after the last row.
  HeadOutput run();
  bool complete() const { return seen_ == layout_.length; }

  // The fold of the attentions over the memory rows (DUET_HEAD_FOLD when the sink was made); tests set it. After
  // run(): how many of those attentions it folded, of how many.
  void set_attention_fold(AttentionFold fold) { fold_ = fold; }
  std::pair<int, int> folded_attentions() const { return folded_; }

 private:
  void allocate(cudaStream_t stream);
  void release(cudaStream_t stream);

  // DUET_HEAD_CHECK=1 (a diagnostic): the rows are also copied to the host and the host head runs beside the
  // device head on them; run() logs how far the two answers are apart.
  std::unique_ptr<HeadInputGatherer> check_;

  const DeviceJointHead& head_;
  SpanLayout layout_;
  int64_t hidden_, width_;
  int64_t seen_ = 0;
  AttentionFold fold_ = attention_fold_from_env();
  std::pair<int, int> folded_{0, 0};
  std::string error_;                                      // the first refusal while taking rows, thrown by finish()
  cudaStream_t rows_stream_ = nullptr;                     // where the buffers below were made and last written
  cudaEvent_t rows_done_ = nullptr;                        // recorded after each chunk's work
  float* memory_ = nullptr;                                // [L, w] M
  std::shared_ptr<const engine::DecisionPrefix> resumed_;  // until the buffers are made: then copied into memory_
  // The prefixes kept from memory_: its buffers are freed only after their copies (release() waits for them).
  std::vector<std::shared_ptr<const DeviceDecisionPrefix>> kept_;
  double* sums_ = nullptr;      // [Q + N, h] sums of LN_hidden rows over each span
  int32_t* span_at_ = nullptr;  // [L]
  float* last_row_ = nullptr;   // [h] LN_hidden(H)[L - 1]
};

// The memory rows M [positions, w] of a prefix on the device, copied from a sink's on a stream of its own (never the
// step stream: a decision worker makes it, and the engine thread may be capturing a decode step's graph there) after
// the sink's chunks up to there (`after`). A sink resuming from it copies the rows on its own stream once they are in.
class DeviceDecisionPrefix final : public engine::DecisionPrefix {
 public:
  DeviceDecisionPrefix(const float* from, int64_t positions, int64_t width, cudaEvent_t after);
  ~DeviceDecisionPrefix() override;
  DeviceDecisionPrefix(const DeviceDecisionPrefix&) = delete;
  DeviceDecisionPrefix& operator=(const DeviceDecisionPrefix&) = delete;

  int64_t positions() const override { return positions_; }
  int64_t width() const { return width_; }
  // Recorded once the rows are copied from the sink that kept them: it may free its rows after this.
  cudaEvent_t copied() const { return copied_; }
  // Copies the rows to `to` on `stream` (after `copied`); the prefix is freed only after the last such copy.
  void copy_to(float* to, cudaStream_t stream) const;

 private:
  int64_t positions_, width_;
  cudaStream_t stream_ = nullptr;  // its own: the copy, and the free
  float* memory_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  cudaEvent_t last_read_ = nullptr;  // re-recorded after each copy_to
  mutable bool read_ = false;
};

// Whether decisions take the device head on a CUDA backbone: yes unless DUET_DEVICE_HEAD=0 (then the host head, with
// its products on the GPU, as before: the comparison the benchmarks make).
bool device_head_wanted();

}  // namespace duet::decision::cuda
