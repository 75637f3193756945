#pragma once
// A stand-in Model for engine unit tests: its logits are a deterministic function of the sequence's tokens
// (a hash of the position and the last few ids), so a sequence's output cannot depend on batching unless the
// engine breaks it. It records every step's pieces so tests can check what the scheduler planned.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "model/model.h"

namespace duet::engine::testing {

struct RecordedPiece {
  int32_t slot = 0;
  int32_t start_position = 0;  // the sequence's position before the piece
  int32_t length = 0;
  model::RowOutput wants = model::RowOutput::none;
  bool carried = false;  // its token was the last launch's draw (model::Piece::carried_from)
};

class FakeModel : public model::Model {
 public:
  explicit FakeModel(int32_t vocab_size = 97, std::vector<int64_t> eos_ids = {});

  const model::Qwen35Config& config() const override { return config_; }
  size_t weight_bytes() const override { return 1 << 20; }
  // Pages of 64 positions, like the real model's (the engine's block manager hands them out).
  int32_t kv_page_positions() const override { return 64; }
  size_t kv_page_bytes() const override { return 64 * sizeof(int32_t); }
  size_t sequence_fixed_bytes() const override { return 0; }
  size_t sequence_state_bytes(int32_t max_positions) const override;
  size_t workspace_bytes(int64_t rows) const override { return static_cast<size_t>(rows) * 64; }
  void reserve_workspace(int64_t) override {}
  // A slot's "GDN state" is the tokens it has consumed (and a snapshot's, likewise): forward() checks each piece's
  // position and page table against it, so the engine's bookkeeping (forks, cache resumes) is checked too.
  std::unique_ptr<backend::StateStorage> new_state_storage(int32_t slots, int64_t kv_pages, int64_t snapshots) override;
  std::vector<model::PieceResult> forward(backend::StateStorage& storage,
                                          std::span<const model::Piece> pieces) override;
  // Carried pieces (model::Piece::carried_from) read the last launch's draws, as a GPU's would on the device.
  std::unique_ptr<Launched> launch(backend::StateStorage& storage, std::span<const model::Piece> pieces) override;
  bool overlaps_steps() const override { return overlaps_; }
  void set_overlaps_steps(bool overlaps) { overlaps_ = overlaps; }
  // A planted fault for the tests' controls: a carried piece reads the draw of the piece `shift` places after the one
  // it names (modulo the last launch's pieces).
  void set_test_carry_shift(int32_t shift) { carry_shift_ = shift; }
  // Another: a penalized carried piece's token is not added to its slot's counts (the engine does not send it).
  void set_test_uncounted_carries(bool uncounted) { test_uncounted_carries_ = uncounted; }
  int64_t carried_rows() const;  // carried pieces launched so far

  // The logits the fake gives after `tokens` (the whole sequence so far).
  std::vector<float> logits_after(std::span<const int32_t> tokens) const;
  // The final-norm row of the last of `tokens` (a decide piece's rows): the first hidden_size of its logits.
  std::vector<float> norm_row_after(std::span<const int32_t> tokens) const;

  void set_step_delay(std::chrono::milliseconds delay) { step_delay_ = delay; }
  // forward() refuses the step (model::PieceRefused naming the piece, no state moved) when a piece carries this id.
  void set_poison_token(int32_t id) { poison_token_ = id; }
  // forward() throws an int (not even a std::exception) after every piece's slot was written when a piece carries this
  // id: a failure mid-step that leaves the step's states half-written.
  void set_crash_token(int32_t id) { crash_token_ = id; }
  std::vector<std::vector<RecordedPiece>> steps() const;
  int32_t states_created() const;  // storages made

 private:
  model::Qwen35Config config_;
  std::chrono::milliseconds step_delay_{0};
  int32_t poison_token_ = -1;
  int32_t crash_token_ = -1;
  mutable std::mutex mutex_;
  std::vector<std::vector<RecordedPiece>> steps_;
  int32_t states_created_ = 0;
  bool overlaps_ = false;
  int32_t carry_shift_ = 0;
  std::vector<int32_t> last_draws_;  // per piece of the last launch, its draw (-1: none)
  int64_t carried_rows_ = 0;
  bool test_uncounted_carries_ = false;
};

}  // namespace duet::engine::testing
