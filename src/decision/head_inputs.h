#pragma once
// Gathers the joint head's inputs from a decision's final-norm rows as its prefill advances, chunk by chunk, and
// runs the head once the last row is in. Of the rows H [L, h] it keeps only what the head reads: the memory
// M = LN_hidden(H) W_mem^T [L, w], the sums of LN_hidden(H) over every question and option span, and the last row;
// a 16K-token prompt's rows (256 MiB at h 4096) are never held, its memory (64 MiB at w 1024) is. Span sums are
// added in position order, so they do not depend on where the prompt was cut into chunks.
#include <memory>
#include <span>
#include <vector>

#include "decision/encoder.h"
#include "decision/joint_head.h"
#include "engine/decision_sink.h"
#include "model/model.h"

namespace duet::decision {

// Where a decision's spans lie and what the head reads of them besides the rows; both gatherers (this one on the
// host, cuda/device_head.h on the GPU) start from it.
struct SpanLayout {
  int64_t length = 0;                   // L
  std::vector<int32_t> span_at;         // [L] the span a position belongs to (questions first, then options), or -1
  std::vector<int32_t> sizes;           // [Q + N] positions in each span
  std::vector<int32_t> owner;           // [N] the question of each option
  std::vector<int32_t> question_types;  // [Q] type ids
  std::vector<float> lexical_means;     // [N, h] l_r: the mean of lm_head rows over option span r's ids
  int64_t first_span = 0;               // the first position of any span: the head keeps only M of those before
};
// Refuses (duet::Error) spans that are empty, overlap or reach past the ids, and a backbone of another hidden size.
SpanLayout span_layout(const JointHead& head, const model::Model& backbone, const Encoding& encoding);

class HeadInputGatherer final : public engine::DecisionSink {
 public:
  // Gathers the lm_head rows of every option span's ids now (l_r), so the engine thread only adds rows. Refuses
  // (duet::Error) spans that are empty, overlap or reach past the ids.
  HeadInputGatherer(std::shared_ptr<const JointHead> head, const model::Model& backbone, const Encoding& encoding);

  void add_rows(int64_t first, int64_t count, std::span<const float> rows) override;
  // The head's logits, options in encoding order; throws duet::Error unless every row came.
  std::vector<float> finish() override;

  // A prefix before the first span is its memory rows alone (HostDecisionPrefix).
  int64_t prefix_limit() const override { return layout_.first_span; }
  std::shared_ptr<const engine::DecisionPrefix> keep_prefix(int64_t positions) override;
  void resume_from(std::shared_ptr<const engine::DecisionPrefix> prefix) override;

  // Everything the head reads; complete once every row came.
  const HeadInputs& inputs() const { return inputs_; }
  bool complete() const { return seen_ == length_; }

 private:
  std::shared_ptr<const JointHead> head_;
  SpanLayout layout_;
  int64_t length_;                 // L
  int64_t hidden_;                 // h
  int64_t seen_ = 0;               // rows added so far
  std::vector<double> span_sums_;  // [Q + N, h] sums of LN_hidden rows
  HeadInputs inputs_;
  std::shared_ptr<const engine::DecisionPrefix> resumed_;  // until the first rows come: then copied into the memory
};

// The memory rows M [positions, w] of a prefix, kept by a HeadInputGatherer.
class HostDecisionPrefix final : public engine::DecisionPrefix {
 public:
  HostDecisionPrefix(int64_t positions, std::vector<float> memory)
      : positions_(positions), memory_(std::move(memory)) {}
  int64_t positions() const override { return positions_; }
  const std::vector<float>& memory() const { return memory_; }

 private:
  int64_t positions_;
  std::vector<float> memory_;
};

}  // namespace duet::decision
