// The joint schema head's forward pass for one request, step by step as ../shared/spec/systemone.md writes it.
// Shapes: L prompt rows, Q questions, N options (all questions'), h hidden, w width.
#include <cmath>

#include "base/error.h"
#include "decision/head_math.h"
#include "decision/joint_head.h"

namespace duet::decision {

namespace {

// Rows [rows, width] picked by index: out[r] = x[index[r]].
std::vector<float> gather(std::span<const float> x, int64_t width, std::span<const int32_t> index) {
  std::vector<float> out;
  out.reserve(index.size() * static_cast<size_t>(width));
  for (int32_t i : index) out.insert(out.end(), x.begin() + i * width, x.begin() + (i + 1) * width);
  return out;
}

double norm_of(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return std::sqrt(sum);
}

// <a / max(|a|, eps), b / max(|b|, eps)>: with eps 1e-12 the spec's <n(a), n(b)>, with 1e-8 its cos(a, b).
float normalized_dot(const float* a, const float* b, int64_t n, double eps) {
  const double na = std::max(norm_of(a, n), eps), nb = std::max(norm_of(b, n), eps);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (a[i] / na) * (b[i] / nb);
  return static_cast<float>(sum);
}

}  // namespace

HeadOutput JointHead::forward(const HeadInputs& in) const {
  const JointHeadWeights& wt = weights_;
  const int64_t h = config_.hidden_size, w = config_.width, heads = config_.heads;
  const auto Q = static_cast<int64_t>(in.question_types.size());
  const auto N = static_cast<int64_t>(in.owner.size());
  if (in.rows < 1 || in.memory.size() != static_cast<size_t>(in.rows * w) ||
      in.question_means.size() != static_cast<size_t>(Q * h) || in.option_means.size() != static_cast<size_t>(N * h) ||
      in.lexical_means.size() != static_cast<size_t>(N * h) || in.last_row.size() != static_cast<size_t>(h))
    fail("joint head: inputs of inconsistent shapes ({} rows, {} questions, {} options)", in.rows, Q, N);
  for (int32_t owner : in.owner)
    if (owner < 0 || owner >= Q) fail("joint head: an option belongs to question {} of {}", owner, Q);

  // Options: R_r = W_oc c_r + W_ol l_r + W_oq q_owner(r)                                        [N, w]
  const std::vector<float> owner_questions = gather(in.question_means, h, in.owner);  // [N, h]
  std::vector<float> r = linear(in.option_means, wt.option_context);
  add_to(r, linear(in.lexical_means, wt.option_lexical));
  add_to(r, linear(owner_questions, wt.option_question));

  // Routing: R = R + MHA(LN_q R, LN_m M, LN_m M); R = R + FF(LN_f R)
  for (const EvidenceLayerWeights& layer : wt.evidence_layers) {
    const std::vector<float> memory = layer_norm(in.memory, layer.memory_norm);
    add_to(r, attention(layer_norm(r, layer.query_norm), memory, layer.attention, heads));
    std::vector<float> hidden = linear(layer_norm(r, layer.feedforward_norm), layer.feedforward_in);
    gelu(hidden);
    add_to(r, linear(hidden, layer.feedforward_out));
  }

  // Questions: b_i = W_q q_i; s_i = sum_j softmax_j(<R_ij, b_i> / sqrt(w)) R_ij over question i's options.
  const std::vector<float> b = linear(in.question_means, wt.question);  // [Q, w]
  std::vector<float> summaries(static_cast<size_t>(Q * w), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(w));
  for (int64_t i = 0; i < Q; ++i) {
    std::vector<int64_t> mine;
    for (int64_t o = 0; o < N; ++o)
      if (in.owner[static_cast<size_t>(o)] == i) mine.push_back(o);
    std::vector<float> scores;
    for (int64_t o : mine) {
      double dot = 0;
      for (int64_t c = 0; c < w; ++c) dot += static_cast<double>(r[o * w + c]) * b[i * w + c];
      scores.push_back(static_cast<float>(dot) * scale);
    }
    softmax(scores);
    for (size_t k = 0; k < mine.size(); ++k)
      for (int64_t c = 0; c < w; ++c) summaries[i * w + c] += scores[k] * r[mine[k] * w + c];
  }
  // F_i = b_i + LN_sum(s_i) + W_g g + T[type_i]
  std::vector<float> f = b;
  add_to(f, layer_norm(summaries, wt.option_summary_norm));
  const std::vector<float> global_term = linear(in.last_row, wt.global_row);  // [w]
  for (int64_t i = 0; i < Q; ++i) {
    const int32_t type = in.question_types[static_cast<size_t>(i)];
    if (type < 0 || type > 2) fail("joint head: question type id {} is not 0, 1 or 2", type);
    for (int64_t c = 0; c < w; ++c) f[i * w + c] += global_term[c] + wt.type_embedding[type * w + c];
  }

  // Decoder (pre-norm): F = F + MHA(LN1 F, LN1 F, LN1 F); F = F + MHA(LN2 F, M, M) with M raw; F = F + FF(LN3 F)
  for (const DecoderLayerWeights& layer : wt.layers) {
    const std::vector<float> x = layer_norm(f, layer.norm1);
    add_to(f, attention(x, x, layer.self_attention, heads));
    add_to(f, attention(layer_norm(f, layer.norm2), in.memory, layer.cross_attention, heads));
    std::vector<float> hidden = linear(layer_norm(f, layer.norm3), layer.linear1);
    gelu(hidden);
    add_to(f, linear(hidden, layer.linear2));
  }
  f = layer_norm(f, wt.field_norm);
  const std::vector<float> o = layer_norm(r, wt.option_norm);  // [N, w]
  const std::vector<float> fo = gather(f, w, in.owner);        // F of each option's question

  // Scores: prior = exp(min(alpha, ln 100)) <n(l_r), n(q_i + g)>;
  //         joint = exp(min(beta, ln 100)) cos(F_i, o_r) + scorer([F_i; o_r; F_i * o_r; |F_i - o_r|])
  std::vector<float> features(static_cast<size_t>(N * 4 * w));
  for (int64_t n = 0; n < N; ++n) {
    float* row = features.data() + n * 4 * w;
    for (int64_t c = 0; c < w; ++c) {
      const float a = fo[n * w + c], z = o[n * w + c];
      row[c] = a;
      row[w + c] = z;
      row[2 * w + c] = a * z;
      row[3 * w + c] = std::fabs(a - z);
    }
  }
  std::vector<float> hidden = linear(features, wt.scorer_in);
  gelu(hidden);
  const std::vector<float> scored = linear(hidden, wt.scorer_out);  // [N, 1]

  const float log_100 = std::log(100.0f);
  const float prior_scale = std::exp(std::min(wt.prior_logit_scale, log_100));
  const float joint_scale = std::exp(std::min(wt.joint_logit_scale, log_100));
  const float gate = 1.0f / (1.0f + std::exp(-wt.residual_gate));
  HeadOutput out;
  std::vector<float> anchor(static_cast<size_t>(h));  // q_i + g
  for (int64_t n = 0; n < N; ++n) {
    const int32_t i = in.owner[static_cast<size_t>(n)];
    for (int64_t c = 0; c < h; ++c) anchor[c] = in.question_means[i * h + c] + in.last_row[c];
    const float prior = prior_scale * normalized_dot(in.lexical_means.data() + n * h, anchor.data(), h, 1e-12);
    const float joint = joint_scale * normalized_dot(fo.data() + n * w, o.data() + n * w, w, 1e-8) + scored[n];
    out.prior.push_back(prior);
    out.joint.push_back(joint);
    out.logits.push_back(prior + gate * joint);
  }
  return out;
}

}  // namespace duet::decision
