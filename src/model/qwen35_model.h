#pragma once
// The Qwen3.5 text model on a backend: config, weights bound by name (views into the mapped checkpoint), and
// per-sequence state. forward() lives in qwen35_forward.cc.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/debug_dump.h"
#include "model/model.h"
#include "model/qwen35_weights.h"

namespace duet::model {

// One sequence: a backend state per layer (GDN state or KV cache, in layer order) and the position.
class Qwen35SequenceState final : public SequenceState {
 public:
  Qwen35SequenceState(std::vector<std::unique_ptr<backend::LayerState>> layers, int32_t max_positions)
      : layers_(std::move(layers)), max_positions_(max_positions) {}
  int32_t position() const override { return position_; }
  int32_t max_positions() const override { return max_positions_; }
  void reset() override;

  backend::LayerState* layer(size_t i) { return layers_[i].get(); }
  void advance(int32_t tokens) { position_ += tokens; }

 private:
  std::vector<std::unique_ptr<backend::LayerState>> layers_;
  int32_t max_positions_;
  int32_t position_ = 0;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint, std::unique_ptr<backend::Backend> backend);

  const Qwen35Config& config() const override { return config_; }
  size_t weight_bytes() const override { return weights_.bytes; }
  size_t sequence_state_bytes(int32_t max_positions) const override;
  std::unique_ptr<SequenceState> new_sequence_state(int32_t max_positions) const override;
  std::vector<PieceResult> forward(std::span<const Piece> pieces) override;

 private:
  Qwen35Config config_;
  checkpoint::Checkpoint checkpoint_;  // owns the mapped files the weights point into
  Qwen35Weights weights_;
  std::unique_ptr<backend::Backend> backend_;
  backend::GdnShape gdn_shape_;
  backend::AttentionShape attention_shape_;
  DebugDump dump_;
};

}  // namespace duet::model
