#pragma once
// The CPU backend's per-sequence, per-layer state and activations, all fp32.
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/delta_rule.h"

namespace duet::backend::cpu {

class CpuActivations final : public Activations {
 public:
  CpuActivations(int64_t rows, int64_t width)
      : Activations(rows, width), values(static_cast<size_t>(rows * width), 0.0f) {}
  float* row(int64_t r) { return values.data() + r * width(); }
  const float* row(int64_t r) const { return values.data() + r * width(); }
  std::vector<float> values;  // [rows, width]
};

// A GDN layer's state: conv history and the chunked delta-rule state of every value head.
class CpuGdnState {
 public:
  explicit CpuGdnState(const GdnShape& shape);
  static size_t bytes_for(const GdnShape& shape);
  void reset();
  DeltaRuleHead head(int64_t value_head);

  GdnShape shape;
  std::vector<float> conv_history;     // [conv_kernel - 1, channels]: the last pre-conv inputs, oldest first
  std::vector<float> boundary_states;  // [value_heads, key_dim, value_dim]
  std::vector<float> chunk_keys;       // [value_heads, 64, key_dim]
  std::vector<float> chunk_cum_decay;  // [value_heads, 64]
  std::vector<float> chunk_values;     // [value_heads, 64, value_dim]
  int64_t position = 0;                // tokens consumed; position % 64 rows of the current chunk are filled
};

// GDN states made when first used, zeros as a new CpuGdnState: a prompt cache's hundreds of snapshot states (each
// tens of kilobytes written at construction) cost nothing until a snapshot is taken. A `duet serve` start spent most
// of its CPU time making them, and a test run starts hundreds of servers.
class LazyGdnStates {
 public:
  LazyGdnStates(const GdnShape& shape, int64_t count) : shape_(shape), states_(static_cast<size_t>(count)) {}
  const GdnShape& shape() const { return shape_; }
  size_t size() const { return states_.size(); }
  CpuGdnState& operator[](size_t i) {
    if (!states_[i]) states_[i] = std::make_unique<CpuGdnState>(shape_);
    return *states_[i];
  }
  const CpuGdnState* made(size_t i) const { return states_[i].get(); }  // null: never used, all zeros

 private:
  GdnShape shape_;
  std::vector<std::unique_ptr<CpuGdnState>> states_;
};

// What StateStorage::rewind needs of a GDN layer's last rewindable step (StepPiece::rewindable), kept beside the
// state by the step itself. Within a chunk, taking rows back costs nothing: the delta rule reads only the chunk's rows
// before `position % 64`, so rewinding is moving `position` back. The conv history is rebuilt from the window the conv
// read anyway (the history before the step, then the step's inputs). Only a step that completes a chunk (folds its rows
// into the boundary state, about rows/64 of verify steps) copies more: the boundary state and the completed chunk's
// rows, taken just before the fold.
struct CpuGdnRewind {
  int64_t start = -1;  // the step's first position; -1: the last step of this slot was not rewindable
  int64_t rows = 0;
  std::vector<float> conv_window;  // [conv_kernel - 1 + rows, channels]
  int64_t folded_at = -1;          // the chunk boundary (position) the step folded at; -1: none
  std::vector<float> boundary_states, chunk_keys, chunk_cum_decay, chunk_values;  // as CpuGdnState's, before the fold
  DeltaRuleHead head(const GdnShape& shape, int64_t value_head);  // a view of the copies above, sized on first use
};

// Floats that read as zeros, from calloc: a large block comes as fresh pages that the kernel zeroes when first
// touched, so a KV cache of hundreds of megabytes costs nothing until it is used (a std::vector wrote every byte of it
// at start: most of a `duet serve` start's CPU time, and a test run starts a hundred servers).
class ZeroedFloats {
 public:
  explicit ZeroedFloats(size_t count);
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
};

// The K/V pages of every attention layer: post-norm, post-RoPE keys and values, fp32.
class CpuKvPages {
 public:
  CpuKvPages(const AttentionShape& shape, int64_t layers, int64_t pages);
  static size_t page_bytes(const AttentionShape& shape);  // one page of one layer
  int64_t count() const { return pages_; }
  void copy_page(int32_t from, int32_t to);  // K and V of every layer
  size_t bytes() const { return static_cast<size_t>(pages_) * keys.size() * page_bytes(shape); }
  // Row `offset` of page `page` for one KV head of one layer: [head_dim] floats.
  float* key(int64_t layer, int32_t page, int64_t offset, int64_t kv_head) {
    return keys[layer].data() + ((page * kKvPagePositions + offset) * shape.kv_heads + kv_head) * shape.head_dim;
  }
  float* value(int64_t layer, int32_t page, int64_t offset, int64_t kv_head) {
    return values[layer].data() + ((page * kKvPagePositions + offset) * shape.kv_heads + kv_head) * shape.head_dim;
  }

  AttentionShape shape;
  std::vector<ZeroedFloats> keys;    // per layer [pages, 64, kv_heads, head_dim]
  std::vector<ZeroedFloats> values;  // per layer [pages, 64, kv_heads, head_dim]

 private:
  int64_t pages_;
};

// One attention layer's view of one sequence's K/V: position p lives at row p % 64 of page page_table[p / 64].
struct CpuKvCache {
  int64_t capacity() const { return static_cast<int64_t>(page_table.size()) * kKvPagePositions; }
  float* key(int64_t pos, int64_t kv_head) const {
    return pages->key(layer, page_table[pos / kKvPagePositions], pos % kKvPagePositions, kv_head);
  }
  float* value(int64_t pos, int64_t kv_head) const {
    return pages->value(layer, page_table[pos / kKvPagePositions], pos % kKvPagePositions, kv_head);
  }

  CpuKvPages* pages = nullptr;
  int64_t layer = 0;
  std::span<const int32_t> page_table;
};

// Every sequence state of a model: `slots` x gdn_layers GDN states, slot-major, the KV pages, and `snapshots` x
// gdn_layers GDN states more for the prompt cache, laid out like the slots.
class CpuStateStorage final : public StateStorage {
 public:
  CpuStateStorage(const Backend* owner, const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                  const AttentionShape& attention, int64_t attention_layers, int64_t pages, int64_t snapshots);
  int64_t slots() const override { return slots_; }
  int64_t pages() const override { return kv.count(); }
  int64_t snapshots() const override { return snapshots_; }
  size_t bytes() const override;
  void reset_slot(int32_t slot) override;
  void copy_slot(int32_t from, int32_t to) override;
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override;
  void save_snapshot(int32_t slot, int32_t snapshot) override;
  void restore_snapshot(int32_t snapshot, int32_t slot) override;
  bool can_rewind() const override { return true; }
  void rewind(int32_t slot, int64_t position) override;
  // The GDN prefill walks its rows in order, so a block end inside a piece is a point it passes (gdn_mixer.cc).
  bool snapshots_inside_steps() const override { return true; }
  std::vector<std::byte> snapshot_bytes(int32_t snapshot) const override;
  std::unique_ptr<HostStateTier> new_host_tier(int64_t snapshots, int64_t pages) override;  // cpu_host_tier.h
  // The penalties' counts, sparse (penalty_counts.h): a slot holds only the ids its sequence has seen.
  void prepare_counts(int32_t vocab) override;
  void update_counts(std::span<const CountsUpdate> updates) override;
  // A step's SampleSpec::counts_slot: refused by name outside the slots or before prepare_counts.
  const PenaltyCounts& counts(int32_t slot) const;
  int64_t gdn_layers() const { return gdn_layers_; }
  CpuGdnState& gdn(int32_t slot, int64_t layer) { return gdn_[static_cast<size_t>(slot * gdn_layers_ + layer)]; }
  CpuGdnState& snapshot_gdn(int32_t snapshot, int64_t layer) {
    check_snapshot(snapshot);
    return snapshot_[static_cast<size_t>(snapshot * gdn_layers_ + layer)];
  }
  const GdnShape& gdn_shape() const { return snapshot_.shape(); }
  CpuGdnRewind& gdn_rewind(int32_t slot, int64_t layer) {
    return rewind_[static_cast<size_t>(slot * gdn_layers_ + layer)];
  }

  CpuKvPages kv;

 private:
  void check_slot(int32_t slot) const;
  void check_snapshot(int32_t snapshot) const;

  int64_t gdn_layers_;
  int64_t slots_;
  int64_t snapshots_;
  std::vector<CpuGdnState> gdn_;       // [slots][gdn_layers]
  LazyGdnStates snapshot_;             // [snapshots][gdn_layers]
  std::vector<CpuGdnRewind> rewind_;   // [slots][gdn_layers]
  int32_t counts_vocab_ = 0;           // 0: prepare_counts not called
  std::vector<PenaltyCounts> counts_;  // [slots]
};

}  // namespace duet::backend::cpu
