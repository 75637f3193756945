#pragma once
// The Qwen3.5 text model on a backend: config, weights bound by name (views into the mapped checkpoint), and
// per-sequence state. forward() lives in qwen35_forward.cc.
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/debug_dump.h"
#include "model/model.h"
#include "model/mtp_weights.h"
#include "model/qwen35_weights.h"
#include "model/runtime_adapter.h"

namespace duet::model {

class Qwen35Model final : public Model {
 public:
  // With `adapter_dir` non-empty, binds that runtime adapter (checked against the base first).
  Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint, std::unique_ptr<backend::Backend> backend,
              const std::string& adapter_dir = {});
  backend::Backend& backend() { return *backend_; }
  const RuntimeAdapter* adapter() const { return adapter_.get(); }

  const Qwen35Config& config() const override { return config_; }
  size_t weight_bytes() const override { return weights_.bytes + (mtp_ ? mtp_->bytes : 0); }
  bool reads_images() const override { return config_.image_token_id >= 0 && backend_->applies_mrope(); }
  bool has_adapter() const override { return adapter_ != nullptr; }
  size_t adapter_bytes() const override { return (adapter_ ? adapter_->bytes() : 0) + merged_adapter_bytes_; }
  // What the backend holds for the adapter merged into its projections (Backend::merge_adapter), in adapter_bytes().
  size_t merged_adapter_bytes() const { return merged_adapter_bytes_; }
  int32_t kv_page_positions() const override { return static_cast<int32_t>(backend::kKvPagePositions); }
  size_t kv_page_bytes() const override;
  size_t sequence_fixed_bytes() const override;
  size_t sequence_state_bytes(int32_t max_positions) const override;
  size_t sequence_rewind_bytes(int64_t rows) const override;
  size_t sequence_counts_bytes() const override;
  backend::Backend* products_backend() const override {
    return backend_->has_host_products() ? backend_.get() : nullptr;
  }
  size_t device_memory_bytes() const override { return backend_->device_memory_bytes(); }
  void restart_measurements() override { backend_->restart_measurements(); }
  size_t workspace_bytes(int64_t rows) const override;
  void reserve_workspace(int64_t rows) override;
  std::unique_ptr<backend::StateStorage> new_state_storage(int32_t slots, int64_t kv_pages, int64_t snapshots) override;
  std::vector<PieceResult> forward(backend::StateStorage& storage, std::span<const Piece> pieces) override;
  std::unique_ptr<Model::Launched> launch(backend::StateStorage& storage, std::span<const Piece> pieces) override;
  std::vector<PieceResult> collect(std::unique_ptr<Model::Launched> step) override;
  bool overlaps_steps() const override { return backend_->draws_ahead(); }
  bool masks_later() const override { return backend_->holds_masks(); }
  std::unique_ptr<Model::Launched> launch_holding_masks(backend::StateStorage& storage,
                                                        std::span<const Piece> pieces) override;
  void release_masks(Model::Launched& step) override;
  void lm_head_rows(std::span<const int32_t> ids, float* out) const override;
  bool has_mtp() const override { return mtp_.has_value(); }
  std::unique_ptr<backend::StateStorage> new_mtp_storage(int64_t kv_pages) override;
  size_t mtp_kv_page_bytes() const override;
  // In mtp_forward.cc.
  std::vector<MtpResult> mtp_forward(backend::StateStorage& storage, std::span<const MtpPiece> pieces) override;

 private:
  size_t step_bytes(int64_t rows, int64_t logit_rows) const;  // workspace of a step
  struct Launched;
  void check_carried(std::span<const Piece> pieces) const;  // PieceRefused for a carried piece that cannot be

  Qwen35Config config_;
  checkpoint::Checkpoint checkpoint_;  // owns the mapped files the weights point into
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<RuntimeAdapter> adapter_;  // declared before weights_: the factors point into its mapped file
  backend::Weight host_lm_head_;             // [V, h] the checkpoint's own bytes (mapped), for lm_head_rows
  Qwen35Weights weights_;                    // as the backend reads them (resident copies)
  std::optional<MtpWeights> mtp_;            // resident like weights_; absent without an MTP layer
  backend::GdnShape gdn_shape_;
  backend::AttentionShape attention_shape_;
  int64_t attention_layers_ = 0;
  int64_t gdn_layers_ = 0;
  // Per adapted row, the most elements one adapter product needs beside its projection (input + rank + output).
  int64_t lora_row_elements_ = 0;
  size_t merged_adapter_bytes_ = 0;  // Backend::merge_adapter's copies
  DebugDump dump_;
  // The draws a piece of the next launch may carry (Piece::carried_from): per piece of the last launch, its draw's
  // index in that step's samples (-1: none, or work followed the draws); empty once other work has begun (a launch
  // that failed, an MTP step).
  std::vector<int64_t> carried_samples_;
};

}  // namespace duet::model
