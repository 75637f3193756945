#include "fake_model.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <thread>

#include "base/error.h"
#include "engine/seeded_draw.h"

namespace duet::engine::testing {

namespace {

class FakeState : public model::SequenceState {
 public:
  FakeState(int32_t max_positions, std::shared_ptr<int64_t> free_pages)
      : max_positions_(max_positions), free_pages_(std::move(free_pages)) {}
  ~FakeState() override { give_back(); }
  FakeState(const FakeState&) = delete;
  FakeState& operator=(const FakeState&) = delete;
  int32_t position() const override { return static_cast<int32_t>(tokens.size()); }
  int32_t max_positions() const override { return max_positions_; }
  int64_t kv_pages() const override { return pages; }
  void reset() override {
    tokens.clear();
    give_back();
  }
  void copy_from(const model::SequenceState& source) override {
    const auto& from = dynamic_cast<const FakeState&>(source);
    if (&from == this) return;
    give_back();
    tokens = from.tokens;
    take(from.pages);
    ++copies;
  }
  int64_t pages_needed(int64_t more) const { return (position() + more + 63) / 64 - pages; }
  int64_t free_pages() const { return free_pages_ ? *free_pages_ : INT64_MAX; }
  void take(int64_t count) {
    pages += count;
    if (free_pages_) *free_pages_ -= count;
  }

  std::vector<int32_t> tokens;
  int64_t pages = 0;
  int32_t copies = 0;  // times it was forked from another state

 private:
  void give_back() {
    if (free_pages_) *free_pages_ += pages;
    pages = 0;
  }
  int32_t max_positions_;
  std::shared_ptr<int64_t> free_pages_;  // null: no shared pool
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

void FakeModel::reserve_state(int32_t, int64_t pages) { free_pages_ = std::make_shared<int64_t>(pages); }

int64_t FakeModel::free_kv_pages() const { return free_pages_ ? *free_pages_ : 0; }

std::unique_ptr<model::SequenceState> FakeModel::new_sequence_state(int32_t max_positions) const {
  std::lock_guard lock(mutex_);
  ++states_created_;
  return std::make_unique<FakeState>(max_positions, free_pages_);
}

std::vector<float> FakeModel::logits_after(std::span<const int32_t> tokens) const {
  // Mixes the position and the last three ids: enough context that greedy outputs do not loop at once.
  uint64_t key = mix64(tokens.size());
  for (size_t i = tokens.size() >= 3 ? tokens.size() - 3 : 0; i < tokens.size(); ++i) {
    key = mix64(key ^ static_cast<uint64_t>(tokens[i]));
  }
  std::vector<float> logits(static_cast<size_t>(config_.vocab_size));
  for (size_t v = 0; v < logits.size(); ++v) {
    logits[v] = static_cast<float>(seeded_uniform(key, static_cast<int64_t>(v)) * 8.0 - 4.0);
  }
  return logits;
}

std::vector<float> FakeModel::norm_row_after(std::span<const int32_t> tokens) const {
  const std::vector<float> logits = logits_after(tokens);
  return {logits.begin(), logits.begin() + std::min<int64_t>(config_.hidden_size, config_.vocab_size)};
}

std::vector<model::PieceResult> FakeModel::forward(std::span<const model::Piece> pieces) {
  if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  std::vector<RecordedPiece> recorded;
  std::vector<model::PieceResult> results(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int32_t id : pieces[i].tokens) {
      if (id == poison_token_) throw model::PieceRefused(i, fmt::format("fake model: poisoned token {}", id));
    }
  }
  // Like the real model: every piece's pages are checked before any state moves, then taken.
  int64_t pages_needed = 0;
  for (const model::Piece& piece : pieces) {
    pages_needed += dynamic_cast<FakeState&>(*piece.state).pages_needed(static_cast<int64_t>(piece.tokens.size()));
  }
  if (!pieces.empty() && pages_needed > dynamic_cast<FakeState&>(*pieces[0].state).free_pages()) {
    fail("fake model: the step needs {} more KV pages, {} are free", pages_needed, free_kv_pages());
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    auto& state = dynamic_cast<FakeState&>(*pieces[i].state);
    state.take(state.pages_needed(static_cast<int64_t>(pieces[i].tokens.size())));
    recorded.push_back({&state, state.position(), static_cast<int32_t>(pieces[i].tokens.size()), pieces[i].wants});
    if (state.position() + static_cast<int32_t>(pieces[i].tokens.size()) > state.max_positions()) {
      fail("fake model: piece overflows its state ({} + {} > {})", state.position(), pieces[i].tokens.size(),
           state.max_positions());
    }
    for (int32_t id : pieces[i].tokens) {
      if (id < 0 || id >= config_.vocab_size) fail("fake model: id {} out of range", id);
      state.tokens.push_back(id);
      if (model::has(pieces[i].wants, model::RowOutput::norm_rows)) {
        const std::vector<float> row = norm_row_after(state.tokens);
        results[i].norm_rows.insert(results[i].norm_rows.end(), row.begin(), row.end());
      }
    }
    if (model::has(pieces[i].wants, model::RowOutput::last_logits)) results[i].logits = logits_after(state.tokens);
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

std::vector<std::vector<RecordedPiece>> FakeModel::steps() const {
  std::lock_guard lock(mutex_);
  return steps_;
}

int32_t FakeModel::states_created() const {
  std::lock_guard lock(mutex_);
  return states_created_;
}

}  // namespace duet::engine::testing
