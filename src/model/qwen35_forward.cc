// The Qwen3.5 forward pass, written once against backend/backend.h. Shapes: R rows in the step (the pieces'
// tokens, concatenated), h hidden, V vocab. Per layer:
//
//   x = x + mixer(input_layernorm(x))      mixer: Gated DeltaNet (linear_attention) or gated attention (full)
//   x = x + mlp(post_attention_layernorm(x))
//
// then the final (1 + w) norm, whose rows the decision head reads, and lm_head for the rows that want logits.
#include <map>
#include <set>

#include "base/error.h"
#include "model/qwen35_model.h"

namespace duet::model {

namespace {

// Checks every piece before any state moves, so a refused step leaves all sequences as they were; then gives each
// sequence the KV pages its piece will write.
std::vector<Qwen35SequenceState*> checked_states(std::span<const Piece> pieces, const Qwen35Config& config) {
  std::vector<Qwen35SequenceState*> states;
  std::set<const SequenceState*> seen;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    auto* state = dynamic_cast<Qwen35SequenceState*>(piece.state);
    auto refuse = [i](std::string reason) { throw PieceRefused(i, fmt::format("forward: piece {} {}", i, reason)); };
    if (state == nullptr) refuse("has no sequence state of this model");
    if (!seen.insert(state).second) refuse("repeats a sequence already in this step");
    if (piece.tokens.empty()) refuse("has no tokens");
    if (static_cast<int64_t>(state->position()) + static_cast<int64_t>(piece.tokens.size()) > state->max_positions())
      refuse(fmt::format("needs positions up to {}, its state holds {}",
                         static_cast<int64_t>(state->position()) + static_cast<int64_t>(piece.tokens.size()),
                         state->max_positions()));
    for (int32_t id : piece.tokens)
      if (id < 0 || id >= config.vocab_size)
        refuse(fmt::format("has token id {} outside the vocabulary [0, {})", id, config.vocab_size));
    states.push_back(state);
  }
  // KV pages, per store (states without a shared store have their own): all checked, then all taken.
  std::map<StateStore*, int64_t> needed;
  for (size_t i = 0; i < pieces.size(); ++i)
    needed[&states[i]->store()] += states[i]->pages_needed(static_cast<int64_t>(pieces[i].tokens.size()));
  for (const auto& [store, pages] : needed)
    if (pages > store->free_pages())
      fail("forward: the step needs {} more KV pages, {} of {} are free", pages, store->free_pages(),
           store->total_pages());
  for (size_t i = 0; i < pieces.size(); ++i)
    states[i]->take_pages(states[i]->pages_needed(static_cast<int64_t>(pieces[i].tokens.size())));
  return states;
}

}  // namespace

std::vector<PieceResult> Qwen35Model::forward(std::span<const Piece> pieces) {
  backend::Backend& be = *backend_;
  for (size_t i = 0; i < pieces.size(); ++i)  // before any state moves
    if (has(pieces[i].wants, RowOutput::sampled) && (!be.samples_rows() || pieces[i].sample == nullptr))
      fail("forward: piece {} asks to be sampled, but {}", i,
           be.samples_rows() ? "carries no sampling settings" : "the backend does not sample");
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!pieces[i].fork_samples.empty() && !has(pieces[i].wants, RowOutput::sampled))
      fail("forward: piece {} asks for more draws from its last row, but not to be sampled", i);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].adapted && adapter_ == nullptr)
      throw PieceRefused(i, fmt::format("forward: piece {} asks for the runtime adapter, but none is loaded", i));
  std::vector<Qwen35SequenceState*> states = checked_states(pieces, config_);

  // The step's layout: decode pieces first, then prefill pieces (each in the order given), so a backend sees each
  // role's rows as one block. Piece i owns rows [first_row, first_row + rows), its next positions.
  std::vector<size_t> order;
  for (auto role : {backend::RowRole::decode, backend::RowRole::prefill})
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].role == role) order.push_back(i);
  std::vector<backend::StepPiece> rows_of(pieces.size());  // indexed like `pieces`
  std::vector<backend::StepPiece> plan_pieces;             // in row order
  std::vector<int32_t> ids;                                // [R]
  for (size_t i : order) {
    Qwen35SequenceState& state = *states[i];
    rows_of[i] = backend::StepPiece{.first_row = static_cast<int64_t>(ids.size()),
                                    .rows = static_cast<int64_t>(pieces[i].tokens.size()),
                                    .start_position = state.position(),
                                    .role = pieces[i].role,
                                    .adapted = pieces[i].adapted,
                                    .storage = &state.store().storage(),
                                    .slot = state.slot(),
                                    .page_table = state.page_table()};
    plan_pieces.push_back(rows_of[i]);
    ids.insert(ids.end(), pieces[i].tokens.begin(), pieces[i].tokens.end());
  }
  const auto R = static_cast<int64_t>(ids.size());
  const int64_t h = config_.hidden_size;
  if (dump_.enabled()) {
    std::vector<int32_t> positions;
    for (const auto& p : plan_pieces)
      for (int64_t t = 0; t < p.rows; ++t) positions.push_back(static_cast<int32_t>(p.start_position + t));
    dump_.begin_step(ids, positions);
  }

  // The rows whose logits come back (lm_head: [V, h]), in row order; piece i's start at logit_first[i].
  std::vector<int64_t> logit_rows;
  std::vector<size_t> logit_first(pieces.size());
  for (size_t i : order) {
    const auto& p = rows_of[i];
    logit_first[i] = logit_rows.size();
    if (has(pieces[i].wants, RowOutput::all_logits)) {
      for (int64_t t = 0; t < p.rows; ++t) logit_rows.push_back(p.first_row + t);
    } else if (has(pieces[i].wants, RowOutput::last_logits)) {
      logit_rows.push_back(p.first_row + p.rows - 1);
    }
  }
  // The rows the backend samples, in row order, and how.
  std::vector<int64_t> sample_rows;
  std::vector<const backend::SampleSpec*> samples;
  std::vector<size_t> sample_first(pieces.size());
  for (size_t i : order) {
    if (!has(pieces[i].wants, RowOutput::sampled)) continue;
    sample_first[i] = sample_rows.size();
    sample_rows.push_back(rows_of[i].first_row + rows_of[i].rows - 1);
    samples.push_back(pieces[i].sample);
    for (const backend::SampleSpec* fork : pieces[i].fork_samples) {  // the same row again, drawn by other settings
      sample_rows.push_back(rows_of[i].first_row + rows_of[i].rows - 1);
      samples.push_back(fork);
    }
  }
  // Never in serving (the engine reserves for its largest step): tools and tests grow the workspace as they go.
  if (const size_t bytes = step_bytes(R, static_cast<int64_t>(logit_rows.size() + sample_rows.size()));
      bytes > be.workspace_bytes())
    be.reserve_workspace(bytes);
  be.begin_step(backend::StepPlan{ids, plan_pieces, logit_rows, sample_rows, samples});
  auto x = be.new_activations(R, h);       // [R, h] the residual stream
  auto normed = be.new_activations(R, h);  // [R, h] a norm's output, the sublayers' input
  auto delta = be.new_activations(R, h);   // [R, h] a sublayer's output, added to the residual
  be.embed(weights_.embed_tokens, *x);
  if (dump_.enabled()) dump_.add(be, "hidden.0", *x);

  // Each residual add is fused with the norm that reads its result (Backend::add_rms_norm): the next sublayer's
  // input norm, and after the last layer the final norm.
  be.rms_norm(*x, weights_.layers.front().input_layernorm, config_.rms_norm_eps, *normed);
  int64_t gdn_layer = 0, attention_layer = 0;
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const Qwen35LayerWeights& layer = weights_.layers[l];
    if (layer.type == LayerType::linear_attention) {
      be.gdn_mixer(layer.gdn, gdn_shape_, gdn_layer++, *normed, *delta);
    } else {
      be.attention_mixer(layer.attention, attention_shape_, attention_layer++, *normed, *delta);
    }
    be.add_rms_norm(*x, *delta, layer.post_attention_layernorm, config_.rms_norm_eps, *normed);
    be.mlp(layer.mlp, *normed, *delta);
    const backend::Weight& next_norm =
        l + 1 < weights_.layers.size() ? weights_.layers[l + 1].input_layernorm : weights_.final_norm;
    be.add_rms_norm(*x, *delta, next_norm, config_.rms_norm_eps, *normed);  // after the last layer: the final-norm rows
    if (dump_.enabled()) dump_.add(be, "hidden." + std::to_string(l + 1), *x);
  }

  if (dump_.enabled()) {
    dump_.add(be, "final_norm", *normed);
    dump_.end_step();
  }

  // Outputs: logits and final-norm rows of the rows each piece asked for.
  const int64_t V = config_.vocab_size;
  std::vector<float> logits(logit_rows.size() * static_cast<size_t>(V));  // [logit rows, V]
  if (!logit_rows.empty()) be.lm_head(weights_.lm_head, *normed, logits.data());
  std::vector<backend::SampledRow> sampled(sample_rows.size());
  if (!sample_rows.empty()) be.sample(weights_.lm_head, *normed, sampled.data());

  std::vector<PieceResult> results(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = rows_of[i];
    const RowOutput wants = pieces[i].wants;
    const int64_t count = has(wants, RowOutput::all_logits) ? p.rows : has(wants, RowOutput::last_logits) ? 1 : 0;
    const auto first = static_cast<int64_t>(logit_first[i]);
    results[i].logits.assign(logits.begin() + first * V, logits.begin() + (first + count) * V);
    if (has(wants, RowOutput::sampled)) {
      results[i].sampled = std::move(sampled[sample_first[i]]);
      for (size_t k = 0; k < pieces[i].fork_samples.size(); ++k)
        results[i].fork_sampled.push_back(std::move(sampled[sample_first[i] + 1 + k]));
    }
    if (has(wants, RowOutput::norm_rows)) {
      results[i].norm_rows.resize(static_cast<size_t>(p.rows * h));
      be.read_rows(*normed, p.first_row, p.rows, results[i].norm_rows.data());
    }
    states[i]->advance(static_cast<int32_t>(p.rows));
  }
  return results;
}

}  // namespace duet::model
