#include "decision/head_inputs.h"

#include <algorithm>

#include "base/error.h"
#include "decision/head_math.h"

namespace duet::decision {

SpanLayout span_layout(const JointHead& head, const model::Model& backbone, const Encoding& encoding) {
  const int64_t hidden = head.config().hidden_size;
  if (backbone.config().hidden_size != hidden)
    fail("decision: the head reads rows of {}, the model makes rows of {}", hidden, backbone.config().hidden_size);
  SpanLayout layout;
  layout.length = static_cast<int64_t>(encoding.ids.size());
  layout.first_span = layout.length;
  layout.span_at.assign(encoding.ids.size(), -1);
  std::vector<Span> spans;  // questions, then every option in encoding order
  for (const EncodedQuestion& question : encoding.questions) {
    spans.push_back(question.span);
    layout.question_types.push_back(static_cast<int32_t>(question.type));
  }
  for (size_t i = 0; i < encoding.questions.size(); ++i)
    for (const Span& option : encoding.questions[i].options) {
      spans.push_back(option);
      layout.owner.push_back(static_cast<int32_t>(i));
    }
  for (size_t s = 0; s < spans.size(); ++s) {
    const Span span = spans[s];
    if (span.begin < 0 || span.end > layout.length || span.size() <= 0)
      fail("decision: span [{}, {}) is empty or outside the {} ids", span.begin, span.end, layout.length);
    for (int32_t p = span.begin; p < span.end; ++p) {
      if (layout.span_at[static_cast<size_t>(p)] >= 0) fail("decision: spans overlap at position {}", p);
      layout.span_at[static_cast<size_t>(p)] = static_cast<int32_t>(s);
    }
    layout.sizes.push_back(span.size());
    layout.first_span = std::min<int64_t>(layout.first_span, span.begin);
  }

  // l_r: the mean of lm_head rows over option span r, gathered by token id.
  const size_t questions = encoding.questions.size(), h = static_cast<size_t>(hidden);
  layout.lexical_means.assign(layout.owner.size() * h, 0.0f);
  for (size_t o = 0; o < layout.owner.size(); ++o) {
    const Span span = spans[questions + o];
    std::vector<float> rows(static_cast<size_t>(span.size()) * h);
    backbone.lm_head_rows(
        std::span(encoding.ids).subspan(static_cast<size_t>(span.begin), static_cast<size_t>(span.size())),
        rows.data());
    for (size_t c = 0; c < h; ++c) {
      double sum = 0;
      for (int32_t t = 0; t < span.size(); ++t) sum += rows[static_cast<size_t>(t) * h + c];
      layout.lexical_means[o * h + c] = static_cast<float>(sum / span.size());
    }
  }
  return layout;
}

HeadInputGatherer::HeadInputGatherer(std::shared_ptr<const JointHead> head, const model::Model& backbone,
                                     const Encoding& encoding)
    : head_(std::move(head)),
      layout_(span_layout(*head_, backbone, encoding)),
      length_(layout_.length),
      hidden_(head_->config().hidden_size) {
  span_sums_.assign(layout_.sizes.size() * static_cast<size_t>(hidden_), 0.0);
  inputs_.owner = layout_.owner;
  inputs_.question_types = layout_.question_types;
  inputs_.lexical_means = layout_.lexical_means;
}

void HeadInputGatherer::resume_from(std::shared_ptr<const engine::DecisionPrefix> prefix) {
  const auto* kept = dynamic_cast<const HostDecisionPrefix*>(prefix.get());
  const auto width = static_cast<size_t>(head_->config().width);
  if (kept == nullptr || seen_ != 0 || kept->positions() > layout_.first_span ||
      kept->memory().size() != static_cast<size_t>(kept->positions()) * width)
    fail(
        "decision: cannot resume from a kept prefix of {} positions (this decision has taken {} rows, its first span "
        "starts at {})",
        prefix ? prefix->positions() : 0, seen_, layout_.first_span);
  resumed_ = std::move(prefix);
  seen_ = kept->positions();
}

std::shared_ptr<const engine::DecisionPrefix> HeadInputGatherer::keep_prefix(int64_t positions) {
  const auto width = static_cast<size_t>(head_->config().width);
  if (positions <= 0 || positions > layout_.first_span || positions > seen_ || resumed_ != nullptr) return nullptr;
  const auto end = inputs_.memory.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(positions) * width);
  return std::make_shared<HostDecisionPrefix>(positions, std::vector<float>(inputs_.memory.begin(), end));
}

void HeadInputGatherer::add_rows(int64_t first, int64_t count, std::span<const float> rows) {
  if (resumed_ != nullptr) {  // the first rows after a resumed prefix: its memory rows come first
    inputs_.memory.reserve(static_cast<size_t>(length_ * head_->config().width));
    const auto& kept = static_cast<const HostDecisionPrefix&>(*resumed_).memory();
    inputs_.memory.assign(kept.begin(), kept.end());
    resumed_.reset();
  }
  if (first != seen_ || count < 0 || first + count > length_ || rows.size() != static_cast<size_t>(count * hidden_))
    fail("decision: rows [{}, {}) came after {} of {} rows ({} values)", first, first + count, seen_, length_,
         rows.size());
  const JointHeadWeights& w = head_->weights();
  // The memory is sized once the decision runs (a slot's worth, in the memory plan), not while it waits in the queue.
  if (first == 0) inputs_.memory.reserve(static_cast<size_t>(length_ * head_->config().width));
  const std::vector<float> normed = layer_norm(rows, w.hidden_norm);  // LN_hidden(H) of the chunk
  const std::vector<float> memory = linear(normed, w.memory);         // its rows of M
  inputs_.memory.insert(inputs_.memory.end(), memory.begin(), memory.end());
  const auto h = static_cast<size_t>(hidden_);
  for (int64_t r = 0; r < count; ++r) {
    const float* row = normed.data() + static_cast<size_t>(r) * h;
    const int32_t span = layout_.span_at[static_cast<size_t>(first + r)];
    if (span >= 0) {
      double* sum = span_sums_.data() + static_cast<size_t>(span) * h;
      for (size_t c = 0; c < h; ++c) sum[c] += row[c];
    }
    if (first + r == length_ - 1) inputs_.last_row.assign(row, row + h);
  }
  seen_ += count;
  if (!complete()) return;
  // Every row is in: the span sums become means.
  const size_t questions = inputs_.question_types.size();
  inputs_.rows = length_;
  inputs_.question_means.resize(questions * h);
  inputs_.option_means.resize(inputs_.owner.size() * h);
  for (size_t s = 0; s < layout_.sizes.size(); ++s) {
    float* mean = s < questions ? &inputs_.question_means[s * h] : &inputs_.option_means[(s - questions) * h];
    for (size_t c = 0; c < h; ++c) mean[c] = static_cast<float>(span_sums_[s * h + c] / layout_.sizes[s]);
  }
  span_sums_ = {};
}

std::vector<float> HeadInputGatherer::finish() {
  if (!complete()) fail("decision: the head needs all {} rows, {} came", length_, seen_);
  return head_->forward(inputs_).logits;
}

}  // namespace duet::decision
