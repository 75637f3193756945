#pragma once
// The Qwen3.5 text model on a backend: config, weights bound by name (views into the mapped checkpoint), and
// per-sequence state. forward() lives in qwen35_forward.cc.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/debug_dump.h"
#include "model/kv_page_pool.h"
#include "model/model.h"
#include "model/qwen35_weights.h"

namespace duet::model {

// One sequence: a backend state per layer (GDN state or a view of its KV pages, in layer order), the page table
// its attention layers share, and the position.
class Qwen35SequenceState final : public SequenceState {
 public:
  // `page_table` is the (empty) table the KV layer states were made to read; the state keeps it alive.
  Qwen35SequenceState(std::vector<std::unique_ptr<backend::LayerState>> layers, std::shared_ptr<KvPagePool> pool,
                      std::unique_ptr<std::vector<int32_t>> page_table, int32_t max_positions)
      : layers_(std::move(layers)),
        pool_(std::move(pool)),
        page_table_(std::move(page_table)),
        max_positions_(max_positions) {}
  ~Qwen35SequenceState() override { pool_->give_back(*page_table_); }
  Qwen35SequenceState(const Qwen35SequenceState&) = delete;
  Qwen35SequenceState& operator=(const Qwen35SequenceState&) = delete;

  int32_t position() const override { return position_; }
  int32_t max_positions() const override { return max_positions_; }
  int64_t kv_pages() const override { return static_cast<int64_t>(page_table_->size()); }
  void reset() override;

  backend::LayerState* layer(size_t i) { return layers_[i].get(); }
  KvPagePool& pool() { return *pool_; }
  // Pages still to take before `tokens` more positions can be written.
  int64_t pages_needed(int64_t tokens) const { return kv_pages_for(position_ + tokens) - kv_pages(); }
  void take_pages(int64_t count) { pool_->take(count, *page_table_); }
  void advance(int32_t tokens) { position_ += tokens; }

 private:
  std::vector<std::unique_ptr<backend::LayerState>> layers_;
  std::shared_ptr<KvPagePool> pool_;
  std::unique_ptr<std::vector<int32_t>> page_table_;  // page ids in position order; its address never changes
  int32_t max_positions_;
  int32_t position_ = 0;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint, std::unique_ptr<backend::Backend> backend);

  const Qwen35Config& config() const override { return config_; }
  size_t weight_bytes() const override { return weights_.bytes; }
  int32_t kv_page_positions() const override { return static_cast<int32_t>(backend::kKvPagePositions); }
  size_t kv_page_bytes() const override;
  size_t sequence_fixed_bytes() const override;
  size_t sequence_state_bytes(int32_t max_positions) const override;
  void reserve_kv_pages(int64_t pages) override;
  int64_t free_kv_pages() const override { return kv_pages_ ? kv_pages_->free_count() : 0; }
  std::unique_ptr<SequenceState> new_sequence_state(int32_t max_positions) const override;
  std::vector<PieceResult> forward(std::span<const Piece> pieces) override;

 private:
  Qwen35Config config_;
  checkpoint::Checkpoint checkpoint_;  // owns the mapped files the weights point into
  Qwen35Weights weights_;
  std::unique_ptr<backend::Backend> backend_;
  backend::GdnShape gdn_shape_;
  backend::AttentionShape attention_shape_;
  int64_t attention_layers_ = 0;
  std::shared_ptr<KvPagePool> kv_pages_;  // the shared pool, once reserved
  DebugDump dump_;
};

}  // namespace duet::model
