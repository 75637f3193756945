#include "fake_model.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <thread>

#include "backend/cpu/sampler.h"
#include "backend/seeded_draw.h"
#include "base/error.h"

namespace duet::engine::testing {

namespace {

class FakeStorage final : public backend::StateStorage {
 public:
  FakeStorage(int32_t slots, int64_t pages, int64_t snapshots)
      : StateStorage(nullptr),
        slots_(static_cast<size_t>(slots)),
        snapshots_(static_cast<size_t>(snapshots)),
        pages_(pages) {}
  int64_t slots() const override { return static_cast<int64_t>(slots_.size()); }
  int64_t pages() const override { return pages_; }
  int64_t snapshots() const override { return static_cast<int64_t>(snapshots_.size()); }
  size_t bytes() const override { return 0; }
  void reset_slot(int32_t slot) override { slots_.at(static_cast<size_t>(slot)).clear(); }
  void copy_slot(int32_t from, int32_t to) override {
    slots_.at(static_cast<size_t>(to)) = slots_.at(static_cast<size_t>(from));
  }
  void copy_pages(std::span<const int32_t>, std::span<const int32_t>) override {}
  void save_snapshot(int32_t slot, int32_t snapshot) override {
    snapshots_.at(static_cast<size_t>(snapshot)) = slots_.at(static_cast<size_t>(slot));
  }
  void restore_snapshot(int32_t snapshot, int32_t slot) override {
    slots_.at(static_cast<size_t>(slot)) = snapshots_.at(static_cast<size_t>(snapshot));
  }
  std::vector<int32_t>& tokens(int32_t slot) { return slots_.at(static_cast<size_t>(slot)); }
  // Penalty counts kept as the CPU backend keeps them (backend/penalty_counts.h).
  void prepare_counts(int32_t vocab) override {
    counts_vocab_ = vocab;
    counts_.assign(slots_.size(), {});
  }
  void update_counts(std::span<const backend::CountsUpdate> updates) override {
    if (counts_vocab_ == 0) fail("fake storage: penalty counts updated before prepare_counts");
    backend::apply_counts_updates(updates, counts_vocab_, counts_);
  }
  const backend::PenaltyCounts* counts(int32_t slot) const {
    return slot < 0 ? nullptr : &counts_.at(static_cast<size_t>(slot));
  }

 private:
  std::vector<std::vector<int32_t>> slots_, snapshots_;  // the tokens each has consumed
  int64_t pages_;
  int32_t counts_vocab_ = 0;
  std::vector<backend::PenaltyCounts> counts_;
};

}  // namespace

FakeModel::FakeModel(int32_t vocab_size, std::vector<int64_t> eos_ids) {
  config_.model_type = "fake";
  config_.vocab_size = vocab_size;
  config_.hidden_size = 16;
  config_.intermediate_size = 32;
  config_.num_hidden_layers = 1;
  config_.eos_token_ids = std::move(eos_ids);
}

size_t FakeModel::sequence_state_bytes(int32_t max_positions) const {
  return static_cast<size_t>(max_positions) * sizeof(int32_t);
}

std::unique_ptr<backend::StateStorage> FakeModel::new_state_storage(int32_t slots, int64_t kv_pages,
                                                                    int64_t snapshots) {
  std::lock_guard lock(mutex_);
  ++states_created_;
  return std::make_unique<FakeStorage>(slots, kv_pages, snapshots);
}

std::vector<float> FakeModel::logits_after(std::span<const int32_t> tokens) const {
  // Mixes the position and the last three ids: enough context that greedy outputs do not loop at once.
  uint64_t key = backend::mix64(tokens.size());
  for (size_t i = tokens.size() >= 3 ? tokens.size() - 3 : 0; i < tokens.size(); ++i) {
    key = backend::mix64(key ^ static_cast<uint64_t>(tokens[i]));
  }
  std::vector<float> logits(static_cast<size_t>(config_.vocab_size));
  for (size_t v = 0; v < logits.size(); ++v) {
    logits[v] = static_cast<float>(backend::seeded_uniform(key, static_cast<int64_t>(v)) * 8.0 - 4.0);
  }
  return logits;
}

std::vector<float> FakeModel::norm_row_after(std::span<const int32_t> tokens) const {
  const std::vector<float> logits = logits_after(tokens);
  return {logits.begin(), logits.begin() + std::min<int64_t>(config_.hidden_size, config_.vocab_size)};
}

std::vector<model::PieceResult> FakeModel::forward(backend::StateStorage& storage,
                                                   std::span<const model::Piece> pieces) {
  if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  std::vector<RecordedPiece> recorded;
  std::vector<model::PieceResult> results(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int32_t id : pieces[i].tokens) {
      if (id == poison_token_) throw model::PieceRefused(i, fmt::format("fake model: poisoned token {}", id));
    }
  }
  auto& slots = dynamic_cast<FakeStorage&>(storage);  // a test's own fake
  for (size_t i = 0; i < pieces.size(); ++i) {
    const model::Piece& piece = pieces[i];
    std::vector<int32_t>& tokens = slots.tokens(piece.slot);
    // The engine's bookkeeping, checked: the position it says is what the slot holds, and the pages cover it.
    if (piece.position != static_cast<int32_t>(tokens.size()))
      fail("fake model: piece {} starts at position {}, its slot {} holds {} tokens", i, piece.position, piece.slot,
           tokens.size());
    const int64_t end = piece.position + static_cast<int64_t>(piece.tokens.size());
    if (static_cast<int64_t>(piece.page_table.size()) * 64 < end)
      fail("fake model: piece {} reaches position {} with {} pages", i, end, piece.page_table.size());
    for (int32_t page : piece.page_table)
      if (page < 0 || page >= slots.pages()) fail("fake model: page {} of {}", page, slots.pages());
    recorded.push_back({piece.slot, piece.position, static_cast<int32_t>(piece.tokens.size()), piece.wants});
    for (int32_t id : piece.tokens) {
      if (id < 0 || id >= config_.vocab_size) fail("fake model: id {} out of range", id);
      tokens.push_back(id);
      if (model::has(piece.wants, model::RowOutput::norm_rows)) {
        const std::vector<float> row = norm_row_after(tokens);
        results[i].norm_rows.insert(results[i].norm_rows.end(), row.begin(), row.end());
      }
    }
    if (model::has(piece.wants, model::RowOutput::last_logits)) results[i].logits = logits_after(tokens);
    // Drawn as the CPU backend draws (Backend::sample): its sampler on this row's logits, by each draw's settings.
    if (model::has(piece.wants, model::RowOutput::sampled)) {
      if (piece.sample == nullptr) fail("fake model: piece {} asks to be sampled without settings", i);
      const std::vector<float> logits = logits_after(tokens);
      results[i].sampled = backend::cpu::sample_row(logits, *piece.sample, slots.counts(piece.sample->counts_slot));
      for (const backend::SampleSpec* fork : piece.fork_samples)
        results[i].fork_sampled.push_back(backend::cpu::sample_row(logits, *fork, slots.counts(fork->counts_slot)));
    }
  }
  for (const model::Piece& piece : pieces) {
    for (int32_t id : piece.tokens) {
      if (id == crash_token_) throw 42;
    }
  }
  std::lock_guard lock(mutex_);
  steps_.push_back(std::move(recorded));
  return results;
}

std::unique_ptr<model::Model::Launched> FakeModel::launch(backend::StateStorage& storage,
                                                          std::span<const model::Piece> pieces) {
  std::vector<model::Piece> resolved(pieces.begin(), pieces.end());
  std::vector<int32_t> carried(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int32_t from = pieces[i].carried_from;
    if (from < 0) continue;
    if (static_cast<size_t>(from) >= last_draws_.size() || last_draws_[static_cast<size_t>(from)] < 0 ||
        pieces[i].tokens.size() != 1)
      throw model::PieceRefused(i, fmt::format("fake model: piece {} carries the missing draw of piece {}", i, from));
    carried[i] = last_draws_[(static_cast<size_t>(from) + static_cast<size_t>(carry_shift_)) % last_draws_.size()];
    if (carried[i] < 0) carried[i] = last_draws_[static_cast<size_t>(from)];
    resolved[i].tokens = std::span(&carried[i], 1);
    resolved[i].carried_from = -1;
  }
  // A penalized carried piece's token joins its slot's counts first, as the backends add it (CarriedId::counts_slot).
  std::vector<backend::CountsUpdate> carried_counts;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].carried_from >= 0 && pieces[i].sample != nullptr && pieces[i].sample->counts_slot >= 0 &&
        !test_uncounted_carries_)
      carried_counts.push_back({pieces[i].sample->counts_slot, carried[i]});
  if (!carried_counts.empty()) storage.update_counts(carried_counts);
  last_draws_.clear();  // only the launch right after may carry them
  auto step = std::make_unique<Launched>();
  step->results = forward(storage, resolved);
  for (size_t i = 0; i < pieces.size(); ++i)
    last_draws_.push_back(model::has(pieces[i].wants, model::RowOutput::sampled) ? step->results[i].sampled.id : -1);
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].carried_from < 0) continue;
    ++carried_rows_;
    steps_.back()[i].carried = true;  // forward() recorded the step's pieces in order
  }
  return step;
}

int64_t FakeModel::carried_rows() const {
  std::lock_guard lock(mutex_);
  return carried_rows_;
}

std::vector<std::vector<RecordedPiece>> FakeModel::steps() const {
  std::lock_guard lock(mutex_);
  return steps_;
}

int32_t FakeModel::states_created() const {
  std::lock_guard lock(mutex_);
  return states_created_;
}

}  // namespace duet::engine::testing
