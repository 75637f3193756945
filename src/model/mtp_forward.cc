// The MTP layer's forward (tools/qwen35_mtp_spec.md), written against backend/backend.h like the main forward.
// Per row j of a piece, with h_j the hidden row given and x the token given (the one at position j + 1):
//
//   u = fc([pre_fc_norm_embedding(embed_tokens[x]) ; pre_fc_norm_hidden(h_j)])   embedding half first
//   u = u + attention(input_layernorm(u))          the MTP layer's own K/V, RoPE at position j
//   u = u + mlp(post_attention_layernorm(u))
//   logits = lm_head(norm(u))                       the main model's lm_head; they predict the token at j + 2
//
// Rounding as in the main forward: the backend's element type throughout, fp32 norm statistics.
#include <fmt/format.h>

#include "base/error.h"
#include "model/piece_checks.h"
#include "model/qwen35_model.h"

namespace duet::model {

namespace {

constexpr RowOutput kMtpOutputs =
    RowOutput::last_logits | RowOutput::all_logits | RowOutput::norm_rows | RowOutput::sampled;

// RowOutput::sampled: the most likely token, drawn by the backend's greedy sampler (the first maximum).
const backend::SampleSpec& greedy() {
  static const backend::SampleSpec spec = [] {
    backend::SampleSpec s;
    s.temperature = 0.0f;
    return s;
  }();
  return spec;
}

// Checks every piece before anything is written, so a refused step leaves every MTP page as it was.
void check_mtp_pieces(std::span<const MtpPiece> pieces, const backend::StateStorage& storage,
                      const Qwen35Config& config) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const MtpPiece& piece = pieces[i];
    auto refuse = [i](std::string reason) {
      throw PieceRefused(i, fmt::format("mtp_forward: piece {} {}", i, reason));
    };
    if (piece.hidden.size() != piece.tokens.size() * static_cast<size_t>(config.hidden_size))
      refuse(fmt::format("has {} hidden values for {} rows of {}", piece.hidden.size(), piece.tokens.size(),
                         config.hidden_size));
    if ((static_cast<uint8_t>(piece.wants) & ~static_cast<uint8_t>(kMtpOutputs)) != 0)
      refuse("asks for an output the MTP layer does not give (last_logits, all_logits, norm_rows, sampled)");
    check_positions("mtp_forward", i, piece.position, piece.tokens, piece.page_table, storage, config);
  }
}

}  // namespace

std::vector<MtpResult> Qwen35Model::mtp_forward(backend::StateStorage& storage, std::span<const MtpPiece> pieces) {
  if (!mtp_) fail("{}: this model has no MTP layer", checkpoint_.source());
  check_mtp_pieces(pieces, storage, config_);
  carried_samples_.clear();  // its step follows the last launch's draws: the next launch may not carry them
  backend::Backend& be = *backend_;
  const MtpWeights& w = *mtp_;
  const int64_t h = config_.hidden_size, V = config_.vocab_size;
  const auto eps = config_.rms_norm_eps;

  // Rows in the pieces' order. The storage has one slot and no GDN layer: every piece names slot 0.
  std::vector<backend::StepPiece> plan_pieces;
  std::vector<int32_t> ids;   // [R] the tokens one position ahead
  std::vector<float> hidden;  // [R, h]
  std::vector<int64_t> logit_rows, sample_rows;
  std::vector<const backend::SampleSpec*> samples;
  for (const MtpPiece& piece : pieces) {
    const auto first = static_cast<int64_t>(ids.size()), rows = static_cast<int64_t>(piece.tokens.size());
    plan_pieces.push_back(backend::StepPiece{.first_row = first,
                                             .rows = rows,
                                             .start_position = piece.position,
                                             .role = piece.role,
                                             .adapted = false,
                                             .slot = 0,
                                             .page_table = piece.page_table});
    ids.insert(ids.end(), piece.tokens.begin(), piece.tokens.end());
    hidden.insert(hidden.end(), piece.hidden.begin(), piece.hidden.end());
    if (has(piece.wants, RowOutput::all_logits)) {
      for (int64_t t = 0; t < rows; ++t) logit_rows.push_back(first + t);
    } else if (has(piece.wants, RowOutput::last_logits)) {
      logit_rows.push_back(first + rows - 1);
    }
    if (has(piece.wants, RowOutput::sampled)) {
      sample_rows.push_back(first + rows - 1);
      samples.push_back(&greedy());
    }
  }
  const auto R = static_cast<int64_t>(ids.size());
  if (const size_t bytes = step_bytes(R, static_cast<int64_t>(logit_rows.size() + sample_rows.size()));
      bytes > be.workspace_bytes())
    be.reserve_workspace(bytes);
  be.begin_step(backend::StepPlan{.storage = &storage,
                                  .ids = ids,
                                  .pieces = plan_pieces,
                                  .logit_rows = logit_rows,
                                  .sample_rows = sample_rows,
                                  .samples = samples,
                                  .host_rows = true});

  auto x = be.new_activations(R, h);       // the residual stream: fc's output, then the decoder layer's
  auto normed = be.new_activations(R, h);  // a norm's output
  auto delta = be.new_activations(R, h);   // a sublayer's output
  {
    auto embedded = be.new_activations(R, h);
    auto given = be.new_activations(R, h);
    auto both = be.new_activations(R, 2 * h);
    be.embed(weights_.embed_tokens, *embedded);
    be.rms_norm(*embedded, w.pre_fc_norm_embedding, eps, *normed);
    be.write_rows(hidden.data(), 0, R, *given);
    be.rms_norm(*given, w.pre_fc_norm_hidden, eps, *delta);
    be.concat(*normed, *delta, *both);  // [e ; g]: fc.weight's first h columns multiply the embedding half
    be.project(w.fc, *both, *x);
  }
  be.rms_norm(*x, w.layer.input_layernorm, eps, *normed);
  be.attention_mixer(w.layer.attention, attention_shape_, 0, *normed, *delta);
  be.add_rms_norm(*x, *delta, w.layer.post_attention_layernorm, eps, *normed);
  be.mlp(w.layer.mlp, *normed, *delta);
  be.add_rms_norm(*x, *delta, w.norm, eps, *normed);  // x: the layer's output; normed: after mtp.norm

  std::vector<float> logits(logit_rows.size() * static_cast<size_t>(V));
  if (!logit_rows.empty()) be.lm_head(weights_.lm_head, *normed, logits.data());
  std::vector<backend::SampledRow> sampled(sample_rows.size());
  if (!sample_rows.empty()) be.sample(weights_.lm_head, *normed, sampled.data());
  std::vector<MtpResult> results(pieces.size());
  size_t logit_first = 0, sample_next = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (has(pieces[i].wants, RowOutput::sampled)) results[i].sampled = sampled[sample_next++].id;
    const backend::StepPiece& p = plan_pieces[i];
    const RowOutput wants = pieces[i].wants;
    const int64_t count = has(wants, RowOutput::all_logits) ? p.rows : has(wants, RowOutput::last_logits) ? 1 : 0;
    results[i].logits.assign(logits.begin() + static_cast<int64_t>(logit_first) * V,
                             logits.begin() + (static_cast<int64_t>(logit_first) + count) * V);
    logit_first += static_cast<size_t>(count);
    if (has(wants, RowOutput::norm_rows)) {
      results[i].norm_rows.resize(static_cast<size_t>(p.rows * h));
      results[i].pre_norm_rows.resize(static_cast<size_t>(p.rows * h));
      be.read_rows(*normed, p.first_row, p.rows, results[i].norm_rows.data());
      be.read_rows(*x, p.first_row, p.rows, results[i].pre_norm_rows.data());
    }
  }
  return results;
}

}  // namespace duet::model
