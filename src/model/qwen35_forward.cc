// The Qwen3.5 forward pass, written once against backend/backend.h. Shapes: R rows in the step (the pieces'
// tokens, concatenated), h hidden, V vocab. Per layer:
//
//   x = x + mixer(input_layernorm(x))      mixer: Gated DeltaNet (linear_attention) or gated attention (full)
//   x = x + mlp(post_attention_layernorm(x))
//
// then the final (1 + w) norm, whose rows the decision head reads, and lm_head for the rows that want logits.
#include <set>

#include "base/error.h"
#include "model/piece_checks.h"
#include "model/qwen35_model.h"

namespace duet::model {

namespace {

// Checks every piece before anything is written, so a refused step leaves every sequence as it was.
void check_pieces(std::span<const Piece> pieces, const backend::StateStorage& storage, const Qwen35Config& config) {
  std::set<int32_t> seen;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    auto refuse = [i](std::string reason) { throw PieceRefused(i, fmt::format("forward: piece {} {}", i, reason)); };
    if (piece.slot < 0 || piece.slot >= storage.slots())
      refuse(fmt::format("names slot {} of a storage with {}", piece.slot, storage.slots()));
    if (!seen.insert(piece.slot).second) refuse("repeats a sequence already in this step");
    check_positions("forward", i, piece.position, piece.tokens, piece.page_table, storage, config);
    check_snapshots("forward", i, piece, storage);
  }
}

// transformers' masked_scatter (docs/vision.md 4): the piece's image rows, in order, over the embeddings of its image
// tokens (rows [first_row, ...) of x), one run of consecutive image tokens at a time.
void scatter_image_rows(backend::Backend& be, const Piece& piece, int64_t first_row, int64_t image_token, int64_t h,
                        backend::Activations& x) {
  const std::span<const int32_t> tokens = piece.tokens;
  int64_t next = 0;  // image rows used so far
  for (size_t t = 0; t < tokens.size();) {
    if (tokens[t] != image_token) {
      ++t;
      continue;
    }
    size_t end = t;
    while (end < tokens.size() && tokens[end] == image_token) ++end;
    const auto count = static_cast<int64_t>(end - t);
    be.write_rows(piece.image_rows.data() + next * h, first_row + static_cast<int64_t>(t), count, x);
    next += count;
    t = end;
  }
}

}  // namespace

std::vector<PieceResult> Qwen35Model::forward(backend::StateStorage& storage, std::span<const Piece> pieces) {
  return collect(launch(storage, pieces));
}

// A launched step's draws on their way (Backend::sample_ahead), and where each piece's go.
// A step dropped before it was collected (its launch threw after the draws were enqueued) still waits for them, so
// that the backend never writes into freed memory.
struct Qwen35Model::Launched : Model::Launched {
  explicit Launched(backend::Backend& be) : backend(be) {}
  ~Launched() override {
    if (!draws) return;
    try {
      backend.finish_sample(sampled.data());
    } catch (...) {  // the step failed already; its error is the one that counts
    }
  }
  backend::Backend& backend;
  bool draws = false;                             // sample_ahead was called and finish_sample not yet
  std::vector<backend::SampledRow> sampled;       // in the step's sample order
  std::vector<size_t> sample_first;               // per piece, its last row's draw in `sampled`
  std::vector<size_t> row_samples, fork_samples;  // per piece, its earlier rows' and its forks' draws
  std::vector<bool> sampled_piece;                // per piece, whether it asked to be sampled
};

std::unique_ptr<Model::Launched> Qwen35Model::launch(backend::StateStorage& storage, std::span<const Piece> pieces) {
  backend::Backend& be = *backend_;
  for (size_t i = 0; i < pieces.size(); ++i)  // before any state moves
    if (has(pieces[i].wants, RowOutput::sampled) && pieces[i].sample == nullptr)
      fail("forward: piece {} asks to be sampled, but carries no sampling settings", i);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!pieces[i].fork_samples.empty() && !has(pieces[i].wants, RowOutput::sampled))
      fail("forward: piece {} asks for more draws from its last row, but not to be sampled", i);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!pieces[i].row_samples.empty() &&
        (!has(pieces[i].wants, RowOutput::sampled) || pieces[i].row_samples.size() + 1 != pieces[i].tokens.size()))
      fail("forward: piece {} asks for {} row draws, but has {} rows and must be sampled", i,
           pieces[i].row_samples.size(), pieces[i].tokens.size());
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].adapted && adapter_ == nullptr)
      throw PieceRefused(i, fmt::format("forward: piece {} asks for the runtime adapter, but none is loaded", i));
  check_pieces(pieces, storage, config_);
  check_carried(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) check_image_inputs("forward", i, pieces[i], config_, attention_shape_, be);

  // The step's layout: decode pieces first, then prefill pieces (each in the order given), so a backend sees each
  // role's rows as one block. Piece i owns rows [first_row, first_row + rows), its next positions.
  std::vector<size_t> order;
  for (auto role : {backend::RowRole::decode, backend::RowRole::prefill})
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].role == role) order.push_back(i);
  std::vector<backend::StepPiece> rows_of(pieces.size());  // indexed like `pieces`
  std::vector<backend::StepPiece> plan_pieces;             // in row order
  std::vector<int32_t> ids;                                // [R]
  std::vector<backend::CarriedId> carried;                 // rows whose ids are the last launch's draws
  for (size_t i : order) {
    rows_of[i] = backend::StepPiece{.first_row = static_cast<int64_t>(ids.size()),
                                    .rows = static_cast<int64_t>(pieces[i].tokens.size()),
                                    .start_position = pieces[i].position,
                                    .role = pieces[i].role,
                                    .adapted = pieces[i].adapted,
                                    .rewindable = pieces[i].rewindable,
                                    .slot = pieces[i].slot,
                                    .page_table = pieces[i].page_table,
                                    .rope_positions = pieces[i].rope_positions,
                                    .rope_delta = pieces[i].rope_delta,
                                    .snapshots = pieces[i].snapshots};
    plan_pieces.push_back(rows_of[i]);
    if (pieces[i].carried_from >= 0)
      carried.push_back({.row = static_cast<int64_t>(ids.size()),
                         .sample = carried_samples_[static_cast<size_t>(pieces[i].carried_from)],
                         .counts_slot = pieces[i].sample != nullptr ? pieces[i].sample->counts_slot : -1});
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
    for (size_t t = 0; t < pieces[i].row_samples.size(); ++t) {  // a verify piece's earlier rows
      sample_rows.push_back(rows_of[i].first_row + static_cast<int64_t>(t));
      samples.push_back(pieces[i].row_samples[t]);
    }
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
  carried_samples_.clear();  // from here the last launch's draws may be overwritten: only this step's may be carried
  be.begin_step(backend::StepPlan{.storage = &storage,
                                  .ids = ids,
                                  .pieces = plan_pieces,
                                  .logit_rows = logit_rows,
                                  .sample_rows = sample_rows,
                                  .samples = samples,
                                  .carried = carried});
  auto x = be.new_activations(R, h);       // [R, h] the residual stream
  auto normed = be.new_activations(R, h);  // [R, h] a norm's output, the sublayers' input
  auto delta = be.new_activations(R, h);   // [R, h] a sublayer's output, added to the residual
  be.embed(weights_.embed_tokens, *x);
  for (size_t i : order)
    if (!pieces[i].image_rows.empty())
      scatter_image_rows(be, pieces[i], rows_of[i].first_row, config_.image_token_id, h, *x);
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
  auto step = std::make_unique<Launched>(be);
  step->sampled.resize(sample_rows.size());
  step->sample_first = std::move(sample_first);
  step->sampled_piece.resize(pieces.size());
  step->row_samples.resize(pieces.size());
  step->fork_samples.resize(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    step->sampled_piece[i] = has(pieces[i].wants, RowOutput::sampled);
    step->row_samples[i] = pieces[i].row_samples.size();
    step->fork_samples[i] = pieces[i].fork_samples.size();
  }
  if (!sample_rows.empty()) {
    be.sample_ahead(weights_.lm_head, *normed, step->sampled.data());
    step->draws = true;
  }

  std::vector<PieceResult>& results = step->results;
  results.resize(pieces.size());
  bool rows_after_draws = false;  // work after the draws: the next step may not carry them
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = rows_of[i];
    const RowOutput wants = pieces[i].wants;
    const int64_t count = has(wants, RowOutput::all_logits) ? p.rows : has(wants, RowOutput::last_logits) ? 1 : 0;
    const auto first = static_cast<int64_t>(logit_first[i]);
    results[i].logits.assign(logits.begin() + first * V, logits.begin() + (first + count) * V);
    if (has(wants, RowOutput::norm_rows) && pieces[i].rows_to != nullptr) {
      pieces[i].rows_to->take_rows(be, *normed, p.first_row, p.rows);
      rows_after_draws = true;
    } else if (has(wants, RowOutput::norm_rows)) {
      results[i].norm_rows.resize(static_cast<size_t>(p.rows * h));
      be.read_rows(*normed, p.first_row, p.rows, results[i].norm_rows.data());
      rows_after_draws = true;
    }
  }
  // What the next launch's carried pieces may name: each sampled piece's own draw.
  carried_samples_.assign(pieces.size(), -1);
  if (!rows_after_draws)
    for (size_t i = 0; i < pieces.size(); ++i)
      if (step->sampled_piece[i]) carried_samples_[i] = static_cast<int64_t>(step->sample_first[i]);
  return step;
}

std::unique_ptr<Model::Launched> Qwen35Model::launch_holding_masks(backend::StateStorage& storage,
                                                                   std::span<const Piece> pieces) {
  if (!backend_->holds_masks()) fail("launch_holding_masks: the {} backend cannot hold masks", backend_->name());
  // The hold applies to this launch's draws alone, whether it reaches them or throws first.
  struct Hold {
    explicit Hold(backend::Backend& be) : backend(be) { backend.hold_masks(true); }
    ~Hold() { backend.hold_masks(false); }
    backend::Backend& backend;
  } hold(*backend_);
  return launch(storage, pieces);
}

void Qwen35Model::release_masks(Model::Launched& launched) {
  auto* step = dynamic_cast<Launched*>(&launched);
  if (step == nullptr) fail("release_masks: a step this model did not launch");
  if (step->draws) backend_->release_masks(step->sampled.data());
}

std::vector<PieceResult> Qwen35Model::collect(std::unique_ptr<Model::Launched> launched) {
  auto* step = dynamic_cast<Launched*>(launched.get());
  if (step == nullptr) fail("collect: a step this model did not launch");
  if (step->draws) {
    step->draws = false;
    backend_->finish_sample(step->sampled.data());
  }
  std::vector<PieceResult> results = std::move(step->results);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!step->sampled_piece[i]) continue;
    const size_t first = step->sample_first[i], earlier = step->row_samples[i];
    results[i].sampled = std::move(step->sampled[first]);
    for (size_t t = 0; t < earlier; ++t)
      results[i].row_sampled.push_back(std::move(step->sampled[first - earlier + t]));
    for (size_t k = 0; k < step->fork_samples[i]; ++k)
      results[i].fork_sampled.push_back(std::move(step->sampled[first + 1 + k]));
  }
  return results;
}

// A carried piece (Piece::carried_from) names a sampled piece of the step launched just before, which nothing has
// followed; it is one decode row whose placeholder is a valid id.
void Qwen35Model::check_carried(std::span<const Piece> pieces) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    if (piece.carried_from < 0) continue;
    auto refuse = [i](std::string reason) {
      throw PieceRefused(i, fmt::format("forward: piece {} carries a draw {}", i, reason));
    };
    if (piece.tokens.size() != 1 || piece.role != backend::RowRole::decode) refuse("but is not one decode row");
    const auto from = static_cast<size_t>(piece.carried_from);
    if (from >= carried_samples_.size() || carried_samples_[from] < 0)
      refuse(fmt::format("of piece {}, which the step just before did not draw for (or other work followed its draws)",
                         piece.carried_from));
  }
}

}  // namespace duet::model
