// The CUDA backend: weights resident on the GPU in the dtypes stored, sequence state (GDN slots, KV pages) and the
// step's activations in device memory, one plan upload per step, and the kernels of kernels.h plus cuBLASLt
// wired to the Backend interface. Activations are BF16; what the reference computes in fp32 stays fp32 inside the
// kernels. GEMMs are chosen by the rows' role, never by the step's size (architecture.md, row invariance): decode
// rows through the batch-invariant skinny GEMM, prefill rows through one cuBLASLt algorithm pinned per shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/adapter_merge.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/device_counts.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/device_rows.h"
#include "backend/cuda/device_step.h"
#include "backend/cuda/gdn_rewind.h"
#include "backend/cuda/host_products.h"
#include "backend/cuda/host_tier.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/logits_dump.h"
#include "backend/cuda/mask_upload.h"
#include "backend/cuda/op_timer.h"
#include "backend/cuda/pinned_gemm.h"
#include "backend/cuda/sample_readback.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/sampling_paths.h"
#include "backend/cuda/skinny_regs_choice.h"
#include "backend/cuda/step_gaps.h"
#include "backend/cuda/step_graphs.h"
#include "backend/cuda/step_upload.h"
#include "base/error.h"
#include "base/log.h"

namespace duet::backend {

namespace cuda {
namespace {

// The most rows a pinned prefill GEMM accepts (checked when the shape is first pinned).
constexpr int64_t kPinnedMaxRows = 32768;
constexpr size_t kCublasWorkspaceBytes = 64u << 20;

DeviceWeight device_weight(const Weight& w) { return DeviceWeight{w.data, w.type == WeightType::f32, w.rows, w.cols}; }
const bf16* bf16_of(const Weight& w) {
  if (w.type != WeightType::bf16) fail("cuda backend: a matrix stored as f32 where BF16 is expected");
  return static_cast<const bf16*>(w.data);
}

class CudaActivations final : public Activations {
 public:
  CudaActivations(int64_t rows, int64_t width, bf16* data) : Activations(rows, width), data(data) {}
  bf16* data;
};
bf16* data_of(const Activations& a) { return static_cast<const CudaActivations&>(a).data; }

// The delta-rule kernels' view of a GDN layer's heads.
GdnDims gdn_dims(const GdnShape& s) {
  return GdnDims{static_cast<int32_t>(s.key_heads), static_cast<int32_t>(s.value_heads),
                 static_cast<int32_t>(s.key_dim), static_cast<int32_t>(s.value_dim)};
}

// Refused where the delta-rule kernels have no instantiation for the heads (gdn_delta_rule_supports): at the memory
// plan and the state storage, when a model loads, instead of at its first step.
DeltaHeadState delta_head(const GdnShape& s) {
  if (!gdn_delta_rule_supports(s.key_dim, s.value_dim))
    fail(
        "cuda backend: no delta-rule kernel for GDN heads of key_dim {} x value_dim {} (there are 16 x 32 and 128 x "
        "128); --backend cpu runs any shape",
        s.key_dim, s.value_dim);
  return DeltaHeadState{static_cast<int32_t>(s.key_dim), static_cast<int32_t>(s.value_dim)};
}

// Every sequence state of a model in device memory, slot-major so one pointer per piece reaches all its GDN layers:
//   conv  [slots][gdn_layers][conv_kernel - 1][channels] BF16
//   delta [slots][gdn_layers][value_heads][DeltaHeadState elems] fp32 (delta_chunks.h)
//   kv    [attention_layers][pages][K | V][64][kv_heads][head_dim] BF16 (device_step.h, kv_key)
class CudaStateStorage final : public StateStorage {
 public:
  CudaStateStorage(const Backend* owner, const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                   const AttentionShape& attention, int64_t attention_layers, int64_t pages, int64_t snapshots,
                   cudaStream_t stream)
      : StateStorage(owner),
        stream_(stream),
        gdn_layers_(gdn_layers),
        slots_(slots),
        pages_(pages),
        conv_layer_(gdn.conv_channels() * (gdn.conv_kernel - 1)),
        delta_layer_(gdn.value_heads * delta_head(gdn).elems()),
        conv_(static_cast<size_t>(slots * gdn_layers * conv_layer_) * sizeof(bf16), "GDN conv state"),
        delta_(static_cast<size_t>(slots * gdn_layers * delta_layer_) * sizeof(float), "GDN delta-rule state"),
        attention_layers_(attention_layers),
        page_elems_(2 * kPagePositions * attention.kv_heads * attention.head_dim),
        kv_(static_cast<size_t>(attention_layers * pages * 2 * kPagePositions * attention.kv_heads *
                                attention.head_dim) *
                sizeof(bf16),
            "KV pages"),
        snapshots_(snapshots),
        conv_snapshots_(static_cast<size_t>(snapshots * gdn_layers * conv_layer_) * sizeof(bf16), "GDN conv snapshots"),
        delta_snapshots_(static_cast<size_t>(snapshots * gdn_layers * delta_layer_) * sizeof(float),
                         "GDN delta-rule snapshots"),
        rewind_(slots, gdn_layers, gdn.conv_channels(), gdn.conv_kernel, stream) {}
  int64_t slots() const override { return slots_; }
  int64_t pages() const override { return pages_; }
  int64_t snapshots() const override { return snapshots_; }
  size_t bytes() const override {
    return conv_.bytes + delta_.bytes + kv_.bytes + conv_snapshots_.bytes + delta_snapshots_.bytes + rewind_.bytes() +
           (counts_ ? counts_->bytes() : 0);
  }
  // The penalties' counts (device_counts.h), dense: allocated once here, updated on the step stream between steps.
  void prepare_counts(int32_t vocab) override {
    if (counts_ && counts_->vocab() == vocab) return;
    counts_ = std::make_unique<DeviceCounts>(slots_, vocab, stream_);
  }
  void update_counts(std::span<const CountsUpdate> updates) override {
    if (!counts_) fail("cuda state: penalty counts updated before prepare_counts");
    counts_->update(updates);
  }
  const DeviceCounts* counts() const { return counts_.get(); }
  void reset_slot(int32_t slot) override {
    rewind_.forget(slot);
    check_cuda(cudaMemsetAsync(conv(slot), 0, static_cast<size_t>(gdn_layers_ * conv_layer_) * sizeof(bf16), stream_),
               "reset GDN conv state");
    check_cuda(
        cudaMemsetAsync(delta(slot), 0, static_cast<size_t>(gdn_layers_ * delta_layer_) * sizeof(float), stream_),
        "reset GDN delta-rule state");
  }
  // A slot's conv and delta-rule states are each one contiguous run ([gdn_layers][...] inside the slot), so a fork is
  // two device-to-device copies on the step stream, ordered after the step that wrote `from`.
  void copy_slot(int32_t from, int32_t to) override {
    if (from == to) return;
    check_slot(from), check_slot(to);
    rewind_.forget(to);
    check_cuda(cudaMemcpyAsync(conv(to), conv(from), static_cast<size_t>(gdn_layers_ * conv_layer_) * sizeof(bf16),
                               cudaMemcpyDeviceToDevice, stream_),
               "fork GDN conv state");
    check_cuda(cudaMemcpyAsync(delta(to), delta(from), static_cast<size_t>(gdn_layers_ * delta_layer_) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               "fork GDN delta-rule state");
  }
  // A page is K | V of one layer, contiguous; the layers are `pages_` pages apart: one 2D copy per page takes it from
  // every layer.
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override {
    if (from.size() != to.size()) fail("cuda state: copying {} KV pages onto {}", from.size(), to.size());
    const size_t page = static_cast<size_t>(page_elems_) * sizeof(bf16);
    for (size_t i = 0; i < from.size(); ++i) {
      check_page(from[i]), check_page(to[i]);
      if (from[i] == to[i]) continue;
      check_cuda(
          cudaMemcpy2DAsync(kv() + to[i] * page_elems_, pages_ * page, kv() + from[i] * page_elems_, pages_ * page,
                            page, static_cast<size_t>(attention_layers_), cudaMemcpyDeviceToDevice, stream_),
          "fork KV page");
    }
  }
  // A snapshot is laid out like a slot ([gdn_layers][...], conv and delta-rule runs apart), so saving and restoring
  // are the fork's two device-to-device copies on the step stream, ordered after the step that wrote the slot.
  void save_snapshot(int32_t slot, int32_t snapshot) override {
    check_slot(slot), check_snapshot(snapshot);
    copy_gdn(conv_snapshot(snapshot), conv(slot), delta_snapshot(snapshot), delta(slot), "save GDN snapshot");
  }
  void restore_snapshot(int32_t snapshot, int32_t slot) override {
    check_slot(slot), check_snapshot(snapshot);
    rewind_.forget(slot);
    copy_gdn(conv(slot), conv_snapshot(snapshot), delta(slot), delta_snapshot(snapshot), "restore GDN snapshot");
  }
  // Speculative decoding (gdn_rewind.h): the conv history comes back from the verify piece's window; the delta rule
  // needs only the host's position to move back, except across a fold, which the engine never drafts over here.
  bool can_rewind() const override { return true; }
  bool can_rewind_folds() const override { return false; }
  void prepare_rewind(int64_t rows) override { rewind_.prepare(rows); }
  void rewind(int32_t slot, int64_t position) override {
    check_slot(slot);
    rewind_.rewind(slot, position, conv(slot), conv_layer_);
  }
  // begin_step: a piece's window for rewinding (GdnRewind::note_piece), null unless it is rewindable. The step keeps
  // this storage const; what it notes is bookkeeping for rewind(), which only the step's caller calls.
  bf16* note_piece(int32_t slot, int64_t start_position, int64_t rows, bool rewindable, int64_t* layer_stride) const {
    return rewind_.note_piece(slot, start_position, rows, rewindable, layer_stride);
  }
  // Snapshots inside steps (StepSnapshot): the conv kernel and the delta-rule walk write them (DeviceSnapshot). On
  // since the GPU suite with tests/cuda/step_snapshots_cuda_test.cc and the exactness bench passed on the H200
  // (docs/benchmarks.md, thirteenth round); DUET_CUDA_STEP_SNAPSHOTS=0 turns them off (the engine then cuts steps at
  // cache points, as before).
  bool snapshots_inside_steps() const override { return snapshots_in_steps_; }
  // Waits for the step stream, then copies the snapshot's conv run and delta-rule run to the host, in that order.
  std::vector<std::byte> snapshot_bytes(int32_t snapshot) const override {
    check_snapshot(snapshot);
    check_cuda(cudaStreamSynchronize(stream_), "snapshot bytes: finish the step");
    const size_t conv_bytes = static_cast<size_t>(gdn_layers_ * conv_layer_) * sizeof(bf16);
    const size_t delta_bytes = static_cast<size_t>(gdn_layers_ * delta_layer_) * sizeof(float);
    std::vector<std::byte> out(conv_bytes + delta_bytes);
    check_cuda(cudaMemcpy(out.data(), conv_snapshot(snapshot), conv_bytes, cudaMemcpyDeviceToHost),
               "snapshot bytes: conv");
    check_cuda(cudaMemcpy(out.data() + conv_bytes, delta_snapshot(snapshot), delta_bytes, cudaMemcpyDeviceToHost),
               "snapshot bytes: delta rule");
    return out;
  }
  // The prompt cache's host tier (host_tier.h): pinned copies of these snapshots and pages, on the step stream.
  std::unique_ptr<HostStateTier> new_host_tier(int64_t snapshots, int64_t pages) override {
    const DeviceStateLayout layout{.stream = stream_,
                                   .conv_snapshots = static_cast<std::byte*>(conv_snapshots_.ptr),
                                   .delta_snapshots = static_cast<std::byte*>(delta_snapshots_.ptr),
                                   .conv_bytes = static_cast<size_t>(gdn_layers_ * conv_layer_) * sizeof(bf16),
                                   .delta_bytes = static_cast<size_t>(gdn_layers_ * delta_layer_) * sizeof(float),
                                   .snapshots = snapshots_,
                                   .kv = static_cast<std::byte*>(kv_.ptr),
                                   .pages = pages_,
                                   .attention_layers = attention_layers_,
                                   .page_bytes = static_cast<size_t>(page_elems_) * sizeof(bf16)};
    return std::make_unique<CudaHostTier>(layout, snapshots, pages);
  }
  void check_snapshot(int32_t snapshot) const {
    if (snapshot < 0 || snapshot >= snapshots_) fail("cuda state: GDN snapshot {} of {}", snapshot, snapshots_);
  }
  bf16* conv_snapshot(int32_t snapshot) const {
    return static_cast<bf16*>(conv_snapshots_.ptr) + snapshot * gdn_layers_ * conv_layer_;
  }
  float* delta_snapshot(int32_t snapshot) const {
    return static_cast<float*>(delta_snapshots_.ptr) + snapshot * gdn_layers_ * delta_layer_;
  }
  bf16* conv(int32_t slot) const { return static_cast<bf16*>(conv_.ptr) + slot * gdn_layers_ * conv_layer_; }
  float* delta(int32_t slot) const { return static_cast<float*>(delta_.ptr) + slot * gdn_layers_ * delta_layer_; }
  bf16* kv() const { return static_cast<bf16*>(kv_.ptr); }
  int64_t conv_layer_stride() const { return conv_layer_; }
  int64_t delta_layer_stride() const { return delta_layer_; }
  int64_t gdn_layers() const { return gdn_layers_; }

 private:
  void check_slot(int32_t slot) const {
    if (slot < 0 || slot >= slots_) fail("cuda state: slot {} of {}", slot, slots_);
  }
  void check_page(int32_t page) const {
    if (page < 0 || page >= pages_) fail("cuda state: KV page {} of {}", page, pages_);
  }
  // One slot's (or snapshot's) GDN state: its conv run and its delta-rule run, each contiguous.
  void copy_gdn(bf16* conv_to, const bf16* conv_from, float* delta_to, const float* delta_from, const char* what) {
    check_cuda(cudaMemcpyAsync(conv_to, conv_from, static_cast<size_t>(gdn_layers_ * conv_layer_) * sizeof(bf16),
                               cudaMemcpyDeviceToDevice, stream_),
               what);
    check_cuda(cudaMemcpyAsync(delta_to, delta_from, static_cast<size_t>(gdn_layers_ * delta_layer_) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               what);
  }

  cudaStream_t stream_;
  int64_t gdn_layers_, slots_, pages_, conv_layer_, delta_layer_;
  DeviceMemory conv_, delta_;
  int64_t attention_layers_, page_elems_;  // page_elems_: K | V of one page of one layer
  DeviceMemory kv_;
  int64_t snapshots_;
  DeviceMemory conv_snapshots_, delta_snapshots_;  // [snapshots][gdn_layers][...] like conv_ and delta_
  mutable GdnRewind rewind_;                       // verify pieces' conv windows, and what each slot can take back
  std::unique_ptr<DeviceCounts> counts_;           // the penalties' counts, once prepare_counts made them
  bool snapshots_in_steps_ = [] {
    const char* off = std::getenv("DUET_CUDA_STEP_SNAPSHOTS");
    return off == nullptr || std::strcmp(off, "0") != 0;
  }();
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasLtCreate(&lt_), "cublasLtCreate");
    cublas_workspace_ = DeviceMemory(kCublasWorkspaceBytes, "cuBLASLt workspace");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (prop.major != 9)
      fail("cuda backend: device {} is {} (sm_{}{}); this build targets sm_90a (H100/H200)", device, prop.name,
           prop.major, prop.minor);
    log_info("cuda backend: {} ({:.1f} GiB)", prop.name, static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    pinned_.clear();
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }

  Weight resident(const Weight& w, WeightUse use) override {
    const bool lora = use == WeightUse::lora_a || use == WeightUse::lora_b;
    // The adapter's products run on the prefill GEMMs, BF16 in: F32 factors would need a cast the checkpoint's
    // owner did not make (duet adapter writes BF16, as the spec's format says).
    if (lora && w.type != WeightType::bf16)
      fail(
          "--clef: the cuda backend reads an adapter's factors as BF16 (as `duet adapter` writes them); this adapter "
          "stores a [{}, {}] factor as F32",
          w.rows, w.cols);
    auto [it, fresh] = resident_.try_emplace(w.data);
    if (fresh) {  // a tied head shares the embedding's copy
      it->second = DeviceMemory(w.bytes(), "weights");
      check_cuda(cudaMemcpy(it->second.ptr, w.data, w.bytes(), cudaMemcpyHostToDevice), "weights to the GPU");
    }
    Weight out = w;
    out.data = it->second.ptr;
    // Pinned (and checked against every row count) now, not in the first step that needs it.
    // B's products are fp32, added to the projection's rows before they are rounded again (adapt()).
    if (use != WeightUse::other) pinned_gemm(w.rows, w.cols, use == WeightUse::logits || use == WeightUse::lora_b);
    return out;
  }

  // BF16 projections of one input, back to back in one allocation (kernels.h, SkinnyOutputs): the decode GEMM reads
  // them in one launch; prefill GEMMs read each view as before.
  void resident_together(std::span<Weight* const> weights, WeightUse use) override {
    size_t total = 0;
    bool together = !weights.empty();
    for (const Weight* w : weights) {
      together = together && w->type == WeightType::bf16 && w->cols == weights[0]->cols &&
                 !resident_.contains(w->data) && w->bytes() % 16 == 0;
      total += w->bytes();
    }
    if (!together) return Backend::resident_together(weights, use);
    DeviceMemory& block = resident_[weights[0]->data] = DeviceMemory(total, "weights");
    size_t at = 0;
    for (Weight* w : weights) {
      char* place = static_cast<char*>(block.ptr) + at;
      check_cuda(cudaMemcpy(place, w->data, w->bytes(), cudaMemcpyHostToDevice), "weights to the GPU");
      at += w->bytes();
      w->data = place;
      pinned_gemm(w->rows, w->cols, false);
    }
  }

  size_t device_memory_bytes() const override {
    size_t free = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    size_t held = workspace_.bytes + cublas_workspace_.bytes;
    for (const auto& [host, copy] : resident_) held += copy.bytes;
    for (const DeviceMemory& copy : merged_) held += copy.bytes;
    return free + held;
  }

  std::unique_ptr<StateStorage> new_state_storage(const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                                                  const AttentionShape& attention, int64_t attention_layers,
                                                  int64_t pages, int64_t snapshots) override {
    auto storage = std::make_unique<CudaStateStorage>(this, gdn, gdn_layers, slots, attention, attention_layers, pages,
                                                      snapshots, stream_);
    for (int32_t s = 0; s < slots; ++s) storage->reset_slot(s);
    return storage;
  }
  size_t gdn_state_bytes(const GdnShape& s) const override {
    return static_cast<size_t>(s.conv_channels() * (s.conv_kernel - 1)) * sizeof(bf16) +
           static_cast<size_t>(s.value_heads * delta_head(s).elems()) * sizeof(float);
  }
  size_t penalty_counts_bytes(int32_t vocab) const override { return DeviceCounts::bytes_for(1, vocab); }
  size_t kv_page_bytes(const AttentionShape& s) const override {
    return static_cast<size_t>(2 * kPagePositions * s.kv_heads * s.head_dim) * sizeof(bf16);
  }
  size_t gdn_rewind_bytes(const GdnShape& s, int64_t rows) const override {
    return GdnRewind::bytes_per_layer(s.conv_channels(), s.conv_kernel, rows);
  }

  void reserve_workspace(size_t bytes) override {
    if (bytes <= workspace_.bytes) return;
    check_cuda(cudaStreamSynchronize(stream_), "workspace: finish the last step");
    last_draws_ = nullptr;  // they were in the old workspace
    workspace_ = DeviceMemory(align_up(bytes), "workspace");
    graphs_.clear();
  }
  size_t workspace_bytes() const override { return workspace_.bytes; }

  void begin_step(const StepPlan& plan) override {
    if (held_) fail("cuda backend: a step begins while the last one's masks are held (release_masks first)");
    if (mode_ == Mode::capture) graphs_.abandon(stream_);  // the last step failed before its sampling
    gaps_.entered(stream_);  // after the abandoned capture: its event must not go into a graph
    mode_ = Mode::eager;
    used_ = 0;
    rows_ = static_cast<int64_t>(plan.ids.size());
    set_dependent_launch_for_step(rows_);
    // Host side: pieces, each row's piece and position, the page tables, the ids and the logit rows, packed into one
    // pinned buffer and sent in one copy.
    std::vector<DevicePiece> pieces;
    std::vector<int32_t> row_piece, row_position, pages, logit_rows, adapted_rows;
    std::vector<DeviceSnapshot> snapshots;
    // Rotary positions (M-RoPE, docs/vision.md 5): a step where some piece carries 3-D positions or a rope delta
    // uploads every row's (time, height, width), a text row's three equal; any other step uploads none, and its rows
    // rotate at their positions exactly as before images existed.
    const bool rope = std::any_of(plan.pieces.begin(), plan.pieces.end(),
                                  [](const StepPiece& p) { return !p.rope_positions.empty() || p.rope_delta != 0; });
    std::vector<int32_t> row_rope;
    three_d_positions_ = false;
    decode_rows_ = 0;
    if (plan.storage == nullptr || plan.storage->owner() != this)
      fail("cuda backend: the step's state storage belongs to another backend");
    const auto* storage = static_cast<const CudaStateStorage*>(plan.storage);  // made by new_state_storage
    step_gdn_layers_ = storage->gdn_layers();
    for (const StepPiece& p : plan.pieces) {
      if (p.slot < 0 || p.slot >= storage->slots())
        fail("cuda backend: slot {} of a storage with {} slots", p.slot, storage->slots());
      if (p.start_position + p.rows > static_cast<int64_t>(p.page_table.size()) * kPagePositions)
        fail("cuda backend: KV pages for {} positions cannot take positions up to {}",
             p.page_table.size() * kPagePositions, p.start_position + p.rows);
      for (int32_t page : p.page_table)
        if (page < 0 || page >= storage->pages())
          fail("cuda backend: KV page {} of a storage with {} pages", page, storage->pages());
      if (!p.rope_positions.empty() && p.rope_positions.size() != static_cast<size_t>(3 * p.rows))
        fail("cuda backend: a piece of {} rows with {} 3-D rotary position values (3 a row)", p.rows,
             p.rope_positions.size());
      three_d_positions_ = three_d_positions_ || !p.rope_positions.empty();
      if (p.role == RowRole::decode) {
        if (p.first_row != decode_rows_) fail("cuda backend: decode pieces must come first in a step");
        decode_rows_ += p.rows;
      }
      DevicePiece d;
      d.first_row = static_cast<int32_t>(p.first_row);
      d.rows = static_cast<int32_t>(p.rows);
      d.start_position = static_cast<int32_t>(p.start_position);
      d.page_offset = static_cast<int32_t>(pages.size());
      d.page_count = static_cast<int32_t>(p.page_table.size());
      d.role = p.role == RowRole::decode ? DeviceRole::decode : DeviceRole::prefill;
      d.conv = storage->conv(p.slot);
      d.delta = storage->delta(p.slot);
      d.conv_layer_stride = storage->conv_layer_stride();
      d.delta_layer_stride = storage->delta_layer_stride();
      d.kv = storage->kv();
      d.kv_pages = storage->pages();
      d.rewind_conv = storage->note_piece(p.slot, p.start_position, p.rows, p.rewindable, &d.rewind_layer_stride);
      d.first_snapshot = static_cast<int32_t>(snapshots.size());
      d.snapshot_count = static_cast<int32_t>(p.snapshots.size());
      // The model checked them (model/piece_checks.h); a one-row piece runs the decode kernels, which write none.
      if (!p.snapshots.empty() && (!storage->snapshots_inside_steps() || p.rows < 2 || p.role != RowRole::prefill))
        fail(
            "cuda backend: GDN snapshots inside a step of a {}-row {} piece (off: DUET_CUDA_STEP_SNAPSHOTS=0; prefill "
            "pieces of several rows only)",
            p.rows, p.role == RowRole::prefill ? "prefill" : "decode");
      for (const StepSnapshot& s : p.snapshots) {
        storage->check_snapshot(s.snapshot);
        snapshots.push_back({static_cast<int32_t>(s.position), storage->conv_snapshot(s.snapshot),
                             storage->delta_snapshot(s.snapshot)});
      }
      pieces.push_back(d);
      pages.insert(pages.end(), p.page_table.begin(), p.page_table.end());
      for (int64_t t = 0; t < p.rows; ++t) {
        row_piece.push_back(static_cast<int32_t>(pieces.size() - 1));
        row_position.push_back(static_cast<int32_t>(p.start_position + t));
        if (p.adapted) adapted_rows.push_back(static_cast<int32_t>(p.first_row + t));
        if (rope && p.rope_positions.empty()) {  // a text row: start + t + delta in all three streams
          const auto at = static_cast<int32_t>(p.start_position + t + p.rope_delta);
          row_rope.insert(row_rope.end(), {at, at, at});
        } else if (rope) {
          row_rope.insert(row_rope.end(), p.rope_positions.begin() + 3 * t, p.rope_positions.begin() + 3 * t + 3);
        }
      }
    }
    for (int64_t r : plan.logit_rows) logit_rows.push_back(static_cast<int32_t>(r));
    timer_.begin_step(decode_rows_ == rows_ ? StepKind::decode : StepKind::prefill, rows_);  // DUET_PROFILE's tables
    int64_t chunk_scratch = 0;
    const std::vector<DeviceChunk> chunks = plan_delta_chunks(pieces, &chunk_scratch);
    const DeltaOrder order = delta_order(pieces, decode_piece_rows_);
    // Rows sampled here: their settings, a verify row's extra ids and the biases travel in the same upload (the counts
    // stay in the storage: device_counts.h); a masked row's place in the masks too, the mask itself is written during
    // sample() (mask_upload.h).
    std::vector<int32_t> sample_rows;
    std::vector<SamplingRowParams> sample_params;
    std::vector<int32_t> extra_ids;
    std::vector<BiasEntry> biases;
    const DeviceCounts* counts = storage->counts();
    bool reads_counts = false;
    samples_ = plan.samples;
    masked_.clear();
    mask_words_ = 0;
    decode_sample_rows_ = 0;
    for (size_t i = 0; i < plan.sample_rows.size(); ++i) {
      const SampleSpec& spec = *plan.samples[i];
      sample_rows.push_back(static_cast<int32_t>(plan.sample_rows[i]));
      decode_sample_rows_ += plan.sample_rows[i] < decode_rows_ ? 1 : 0;
      SamplingRowParams p;
      static_cast<SamplingKnobs&>(p) = spec;
      p.top_logprobs = std::min(spec.top_logprobs, kMaxTopLogprobs);
      p.seed = spec.seed;
      p.position = spec.position;
      if (spec.counts_slot >= 0) {
        if (counts == nullptr || spec.counts_slot >= counts->slots())
          fail("cuda backend: sample {} reads the penalty counts of slot {}, which the storage does not keep", i,
               spec.counts_slot);
        p.counts_slot = spec.counts_slot;
        reads_counts = true;
      }
      p.extra_offset = static_cast<int32_t>(extra_ids.size());
      p.extra_count = static_cast<int32_t>(spec.extra_generated.size());
      extra_ids.insert(extra_ids.end(), spec.extra_generated.begin(), spec.extra_generated.end());
      p.bias_offset = static_cast<int32_t>(biases.size());
      p.bias_count = static_cast<int32_t>(spec.logit_bias.size());
      for (const auto& [id, bias] : spec.logit_bias) biases.push_back(BiasEntry{id, bias});
      if (spec.masked()) {
        if (!spec.allowed.empty() && spec.mask_writer != nullptr)
          fail("cuda backend: sample {} carries both a mask and a mask writer", i);
        const size_t words = spec.mask_words();
        p.mask_offset = static_cast<int64_t>(mask_words_);
        p.mask_words = static_cast<int32_t>(words);
        masked_.push_back({i, mask_words_, words});
        mask_words_ += (words + 3) / 4 * 4;  // each row's mask on a 16-byte boundary
      }
      sample_params.push_back(p);
    }
    if (slow_rows_.on()) sample_params_host_ = sample_params;
    top_logprobs_asked_ = std::any_of(sample_params.begin(), sample_params.end(),
                                      [](const SamplingRowParams& p) { return p.top_logprobs > 0; });
    if (!masked_.empty()) mask_upload_.arrange(mask_words_);
    masks_ = masked_.empty() ? nullptr : mask_upload_.device();
    decode_logit_rows_ = 0;
    for (int64_t r : plan.logit_rows) decode_logit_rows_ += r < decode_rows_ ? 1 : 0;
    logit_row_count_ = static_cast<int32_t>(plan.logit_rows.size());

    // Carried rows (StepPlan::carried) go up as -(1 + the draw's index); the carry kernel puts the draws' ids there.
    // A penalized carried row's counts slot goes up beside them: the kernel adds the id to that slot's counts.
    std::vector<int32_t> carried_ids, carried_counts;
    if (!plan.carried.empty()) {
      if (last_draws_ == nullptr) fail("cuda backend: a step carries draws, but the last step's may not be read");
      carried_ids.assign(plan.ids.begin(), plan.ids.end());
      for (const CarriedId& c : plan.carried) {
        if (c.row < 0 || c.row >= rows_ || c.sample < 0 || c.sample >= last_draw_count_)
          fail("cuda backend: row {} of {} carries draw {} of a step that drew {}", c.row, rows_, c.sample,
               last_draw_count_);
        carried_ids[static_cast<size_t>(c.row)] = static_cast<int32_t>(-1 - c.sample);
        if (c.counts_slot < 0) continue;
        if (counts == nullptr || c.counts_slot >= counts->slots())
          fail(
              "cuda backend: row {} carries a draw into the penalty counts of slot {}, which the storage does not keep",
              c.row, c.counts_slot);
        if (carried_counts.empty()) carried_counts.assign(static_cast<size_t>(rows_), -1);
        carried_counts[static_cast<size_t>(c.row)] = c.counts_slot;
      }
    }

    // The one upload, each array at its region's fixed address (step_upload.h); when a region had to grow, every
    // address moved and no captured graph may run again.
    auto bytes_of = [](const auto& v) { return v.size() * sizeof(v[0]); };
    StepSizes sizes{};
    auto size_of = [&](StepArray a) -> size_t& { return sizes[static_cast<size_t>(a)]; };
    size_of(StepArray::pieces) = bytes_of(pieces);
    size_of(StepArray::row_piece) = bytes_of(row_piece);
    size_of(StepArray::row_position) = bytes_of(row_position);
    size_of(StepArray::chunks) = bytes_of(chunks);
    size_of(StepArray::piece_order) = bytes_of(order.pieces);
    size_of(StepArray::chunk_order) = bytes_of(order.chunks);
    size_of(StepArray::ids) = bytes_of(plan.ids);
    size_of(StepArray::logit_rows) = bytes_of(logit_rows);
    size_of(StepArray::sample_rows) = bytes_of(sample_rows);
    size_of(StepArray::adapted_rows) = bytes_of(adapted_rows);
    size_of(StepArray::sample_params) = bytes_of(sample_params);
    size_of(StepArray::snapshots) = bytes_of(snapshots);
    size_of(StepArray::page_table) = bytes_of(pages);
    size_of(StepArray::extra_ids) = bytes_of(extra_ids);
    size_of(StepArray::biases) = bytes_of(biases);
    size_of(StepArray::row_rope) = bytes_of(row_rope);
    size_of(StepArray::carried_counts) = bytes_of(carried_counts);
    if (upload_.arrange(sizes)) graphs_.clear();
    auto put = [&](StepArray a, const auto& v) { return upload_.put(a, v.data(), bytes_of(v)); };
    step_ = DeviceStep{};
    step_.pieces = static_cast<int32_t>(pieces.size());
    step_.rows = static_cast<int32_t>(rows_);
    step_.piece = static_cast<const DevicePiece*>(put(StepArray::pieces, pieces));
    step_.row_piece = static_cast<const int32_t*>(put(StepArray::row_piece, row_piece));
    step_.row_position = static_cast<const int32_t*>(put(StepArray::row_position, row_position));
    step_.row_rope = row_rope.empty() ? nullptr : static_cast<const int32_t*>(put(StepArray::row_rope, row_rope));
    step_.chunks = static_cast<int32_t>(chunks.size());
    step_.chunk = static_cast<const DeviceChunk*>(put(StepArray::chunks, chunks));
    chunk_scratch_ = chunk_scratch;
    step_.piece_order = static_cast<const int32_t*>(put(StepArray::piece_order, order.pieces));
    step_.chunk_order = static_cast<const int32_t*>(put(StepArray::chunk_order, order.chunks));
    step_.multi_pieces = order.multi_pieces;
    step_.multi_chunks = order.multi_chunks;
    step_.few_pieces = order.few_pieces;
    step_.fold_pieces = order.fold_pieces;
    step_.decode_rows = static_cast<int32_t>(decode_rows_);
    step_.snapshots = static_cast<int32_t>(snapshots.size());
    step_.snapshot = static_cast<const DeviceSnapshot*>(put(StepArray::snapshots, snapshots));
    step_.page_table = static_cast<const int32_t*>(put(StepArray::page_table, pages));
    ids_ = static_cast<const int32_t*>(carried_ids.empty() ? put(StepArray::ids, plan.ids)
                                                           : put(StepArray::ids, carried_ids));
    logit_rows_ = static_cast<const int32_t*>(put(StepArray::logit_rows, logit_rows));
    sample_rows_ = static_cast<const int32_t*>(put(StepArray::sample_rows, sample_rows));
    adapted_rows_ = static_cast<const int32_t*>(put(StepArray::adapted_rows, adapted_rows));
    adapted_count_ = static_cast<int32_t>(adapted_rows.size());
    // The adapted pieces' rows as ranges, for the merged adapter's GEMMs (prefill_rows); only while they are all
    // prefill rows (a decision's are): otherwise adapt() takes them.
    adapted_ranges_.clear();
    for (const StepPiece& p : plan.pieces)
      if (p.adapted && p.rows > 0) adapted_ranges_.push_back({p.first_row, p.first_row + p.rows});
    std::sort(adapted_ranges_.begin(), adapted_ranges_.end());
    adapted_in_prefill_ = std::all_of(adapted_ranges_.begin(), adapted_ranges_.end(),
                                      [&](const auto& r) { return r.first >= decode_rows_; });
    sample_params_ = static_cast<const SamplingRowParams*>(put(StepArray::sample_params, sample_params));
    tables_ = PenaltyTables{};
    if (reads_counts) tables_.counts = counts->words(), tables_.counts_vocab = counts->vocab();
    if (!extra_ids.empty()) tables_.extra_ids = static_cast<const int32_t*>(put(StepArray::extra_ids, extra_ids));
    if (!biases.empty()) tables_.biases = static_cast<const BiasEntry*>(put(StepArray::biases, biases));
    const auto* device_carried_counts =
        carried_counts.empty() ? nullptr : static_cast<const int32_t*>(put(StepArray::carried_counts, carried_counts));
    upload_.send(stream_);
    if (!carried_ids.empty())  // before the step's graph, which reads the ids where they always are
      launch_carry_draws(const_cast<int32_t*>(ids_), static_cast<int32_t>(rows_), last_draws_, device_carried_counts,
                         carried_counts.empty() ? nullptr : counts->words(),
                         carried_counts.empty() ? 0 : counts->vocab(), stream_);
    last_draws_ = nullptr;  // only the step right after its draws may carry them
    gaps_.began(rows_);

    // A decode step whose every piece samples one row replays (or is captured into) its counts' graph. A step with
    // structured outputs' masks has a graph of its own that ends at the logits: its sampler runs after the host has
    // written the masks (sample(); model_cuda_test's GraphedMaskedStepsEqualEagerOnes, MaskedStepsSplitAroundTheMasks).
    // The rows' rotary positions of decode steps after a prompt with images have their own region and graphs (the
    // key's `rope`: attention prep reads row_rope there, row_position elsewhere; vision_cuda_test's
    // GraphedDecodeAfterAnImageEqualsEager).
    // Verify pieces (drafts: several decode rows of one sequence, every row sampled) replay graphs too: their key also
    // holds the delta rule's chunk counts, the only launch sizes of such a step that its rows and pieces do not fix.
    const bool graphed = graphs_on_ && decode_rows_ == rows_ && plan.logit_rows.empty() && adapted_rows.empty() &&
                         snapshots.empty() && !pieces.empty() && !plan.host_rows &&
                         static_cast<int64_t>(plan.sample_rows.size()) >= static_cast<int64_t>(pieces.size());
    if (graphed) {
      const StepGraphKey key{rows_,
                             static_cast<int64_t>(pieces.size()),
                             static_cast<int64_t>(plan.sample_rows.size()),
                             tables_.counts != nullptr,
                             tables_.extra_ids != nullptr,
                             tables_.biases != nullptr,
                             masks_ != nullptr,
                             step_.row_rope != nullptr,
                             step_.chunks,
                             step_.multi_pieces,
                             step_.multi_chunks,
                             step_.few_pieces,
                             step_.fold_pieces};
      // The counts' address is a kernel argument, not a plan array: a step over another storage's counts (a second
      // storage of the same backend) forgets the graphs that hold the first's.
      if (tables_.counts != nullptr && tables_.counts != graphed_counts_) {
        graphs_.clear();
        graphed_counts_ = tables_.counts;
      }
      mode_ = graphs_.begin(key, graph_arguments(), stream_) ? Mode::replay : Mode::capture;
    }
  }

  std::unique_ptr<Activations> new_activations(int64_t rows, int64_t width) override {
    return std::make_unique<CudaActivations>(rows, width, scratch<bf16>(rows * width));
  }

  void embed(const Weight& table, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    timer_.time("embed", stream_, [&] {
      launch_embed(bf16_of(table), table.cols, ids_, static_cast<int32_t>(rows_), data_of(out), stream_);
    });
  }

  void rms_norm(const Activations& x, const Weight& w, double eps, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    timer_.time("rms_norm", stream_, [&] {
      launch_rms_norm(data_of(x), x.rows(), static_cast<int32_t>(x.width()), device_weight(w), static_cast<float>(eps),
                      true, data_of(out), stream_);
    });
  }

  void add_rms_norm(Activations& x, const Activations& y, const Weight& w, double eps, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    timer_.time("add_rms_norm", stream_, [&] {
      launch_add_rms_norm(data_of(x), data_of(y), x.rows(), static_cast<int32_t>(x.width()), device_weight(w),
                          static_cast<float>(eps), true, data_of(out), stream_);
    });
  }

  void add(Activations& x, const Activations& y) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    timer_.time("add", stream_, [&] { launch_add(data_of(x), data_of(y), x.rows() * x.width(), stream_); });
  }

  void gdn_mixer(const GdnWeights& w, const GdnShape& s, int64_t gdn_layer, const Activations& x,
                 Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    const size_t mark = used_;
    const int64_t R = x.rows(), C = s.conv_channels(), vw = s.value_heads * s.value_dim, vh = s.value_heads;
    bf16* qkv = scratch<bf16>(R * C);
    bf16* z = scratch<bf16>(R * vw);
    bf16* b = scratch<bf16>(R * vh);
    bf16* a = scratch<bf16>(R * vh);
    gemm_together("gdn.in_proj", data_of(x), R,
                  {{"gdn.in_proj_qkv", w.in_proj_qkv, w.adapter.in_proj_qkv, qkv},
                   {"gdn.in_proj_z", w.in_proj_z, w.adapter.in_proj_z, z},
                   {"gdn.in_proj_b", w.in_proj_b, w.adapter.in_proj_b, b},
                   {"gdn.in_proj_a", w.in_proj_a, w.adapter.in_proj_a, a}});
    bf16* conv = scratch<bf16>(R * C);
    float* beta = scratch<float>(R * vh);
    float* g = scratch<float>(R * vh);
    const GdnGateArrays gates{b,    a, device_weight(w.A_log), device_weight(w.dt_bias), static_cast<int32_t>(vh),
                              beta, g};
    timer_.time("gdn.conv_gates", stream_, [&] {
      launch_gdn_conv_silu(step_, static_cast<int32_t>(gdn_layer), device_weight(w.conv1d), static_cast<int32_t>(C),
                           static_cast<int32_t>(s.conv_kernel), qkv, conv, stream_, &gates);
    });
    float* core = scratch<float>(R * vw);
    const GdnDims dims = gdn_dims(s);
    // Sized by the bound per row (delta_chunks.h), not by this step's chunks, so a decode step's addresses do not
    // move with its positions.
    if (chunk_scratch_ > (2 * kDeltaChunk + 1) * R) fail("cuda backend: chunk scratch over its bound");
    float* chunk_scratch = scratch<float>((2 * kDeltaChunk + 1) * R * vh);
    bf16* normed = qkv;  // qkv is spent (the delta rule reads the conv's output); [R, vw] fits in [R, C]
    // The decode rows' gated norm comes with their delta rule; a step with other rows norms them all after it (the
    // decode rows again, with the same bits).
    const GdnNormArrays norm{z, device_weight(w.norm), static_cast<float>(s.norm_eps), normed};
    const DeltaFolds folds = delta_folds();
    timer_.time("gdn.delta_rule", stream_, [&] {
      launch_gdn_delta_rule(step_, static_cast<int32_t>(gdn_layer), conv, beta, g, dims, chunk_scratch, core, stream_,
                            &norm, folds);
    });
    // DUET_DELTA_FOLDS=step: every layer's folds once the last layer's delta rule is launched (kernels.h).
    if (folds == DeltaFolds::after_last_layer && gdn_layer == step_gdn_layers_ - 1) {
      timer_.time("gdn.folds", stream_,
                  [&] { launch_gdn_folds(step_, static_cast<int32_t>(step_gdn_layers_), dims, stream_); });
    }
    if (step_.multi_pieces > 0) {
      timer_.time("gdn.gated_norm", stream_, [&] {
        launch_gdn_gated_norm(core, z, device_weight(w.norm), static_cast<float>(s.norm_eps), R,
                              static_cast<int32_t>(vh), static_cast<int32_t>(s.value_dim), normed, stream_);
      });
    }
    gemm("gdn.out_proj", normed, R, w.out_proj, w.adapter.out_proj, data_of(out));
    used_ = mark;
  }

  void attention_mixer(const AttentionWeights& w, const AttentionShape& s, int64_t attention_layer,
                       const Activations& x, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    const size_t mark = used_;
    const int64_t R = x.rows(), hd = s.head_dim;
    bf16* q_gate = scratch<bf16>(R * s.q_heads * 2 * hd);
    bf16* k = scratch<bf16>(R * s.kv_heads * hd);
    bf16* v = scratch<bf16>(R * s.kv_heads * hd);
    gemm_together("attn.qkv_proj", data_of(x), R,
                  {{"attn.q_proj", w.q_proj, w.adapter.q_proj, q_gate},
                   {"attn.k_proj", w.k_proj, w.adapter.k_proj, k},
                   {"attn.v_proj", w.v_proj, w.adapter.v_proj, v}});
    const AttentionDims dims{static_cast<int32_t>(s.q_heads),  static_cast<int32_t>(s.kv_heads),
                             static_cast<int32_t>(hd),         static_cast<int32_t>(s.rotary_dim),
                             static_cast<float>(s.rope_theta), static_cast<float>(s.norm_eps)};
    const RopeStreams streams = rope_streams(s);
    timer_.time("attn.prep", stream_, [&] {
      launch_attention_prep(step_, static_cast<int32_t>(attention_layer), q_gate, k, v, device_weight(w.q_norm),
                            device_weight(w.k_norm), dims, stream_, streams);
    });
    bf16* attended = scratch<bf16>(R * s.q_heads * hd);
    timer_.time("attn.attention", stream_, [&] {
      launch_attention(step_, static_cast<int32_t>(attention_layer), q_gate, dims, attended, stream_);
    });
    gemm("attn.o_proj", attended, R, w.o_proj, w.adapter.o_proj, data_of(out));
    used_ = mark;
  }

  void mlp(const MlpWeights& w, const Activations& x, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    const size_t mark = used_;
    const int64_t R = x.rows(), ffn = w.gate_proj.rows;
    bf16* gate = scratch<bf16>(R * ffn);
    bf16* up = scratch<bf16>(R * ffn);
    const int64_t decode = std::min<int64_t>(decode_rows_, R);
    if (swiglu_in_gemm(w, decode)) {
      // The decode rows' gate | up GEMM writes silu(gate) * up itself (launch_skinny_gemm_swiglu: the same bits as the
      // two outputs and launch_swiglu); the other rows as below.
      timer_.time(
          "mlp.gate_up_proj", stream_,
          [&] {
            launch_skinny_gemm_swiglu(data_of(x), static_cast<int32_t>(decode), bf16_of(w.gate_proj),
                                      static_cast<int32_t>(ffn), static_cast<int32_t>(w.gate_proj.cols), gate, stream_);
          },
          " skinny swiglu");
      prefill_rows("mlp.gate_proj", data_of(x), R, decode, w.gate_proj, w.adapter.gate_proj, gate);
      prefill_rows("mlp.up_proj", data_of(x), R, decode, w.up_proj, w.adapter.up_proj, up);
      if (R > decode)
        timer_.time("mlp.swiglu", stream_, [&] {
          launch_swiglu(gate + decode * ffn, up + decode * ffn, (R - decode) * ffn, gate + decode * ffn, stream_);
        });
    } else {
      gemm_together("mlp.gate_up_proj", data_of(x), R,
                    {{"mlp.gate_proj", w.gate_proj, w.adapter.gate_proj, gate},
                     {"mlp.up_proj", w.up_proj, w.adapter.up_proj, up}});
      timer_.time("mlp.swiglu", stream_, [&] { launch_swiglu(gate, up, R * ffn, gate, stream_); });
    }
    gemm("mlp.down_proj", gate, R, w.down_proj, w.adapter.down_proj, data_of(out));
    used_ = mark;
  }

  void lm_head(const Weight& head, const Activations& x, float* logits) override {
    const size_t mark = used_;
    const int64_t n = logit_row_count_, h = x.width(), V = head.rows;
    bf16* selected = scratch<bf16>(n * h);
    timer_.time("lm_head.gather", stream_, [&] {
      launch_gather_rows(data_of(x), static_cast<int32_t>(h), logit_rows_, static_cast<int32_t>(n), selected, stream_);
    });
    float* out = scratch<float>(n * V);
    gemm_split("lm_head", selected, n, decode_logit_rows_, head, out, true);
    check_cuda(
        cudaMemcpyAsync(logits, out, static_cast<size_t>(n * V) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "logits to the host");
    check_cuda(cudaStreamSynchronize(stream_), "lm_head");
    timer_.collect();
    used_ = mark;
  }

  bool applies_adapters() const override { return true; }
  // The adapter merged into a copy of each projection (adapter_merge.h), unless DUET_ADAPTER_PRODUCTS=1 keeps the
  // low-rank products (adapt(): no second copy, 1.26-1.55x the merged checkpoint's latency at rank 256 on the H200).
  size_t merge_adapter(const Weight& w, LoraFactors& lora) override {
    static const bool products = [] {
      const char* env = std::getenv("DUET_ADAPTER_PRODUCTS");
      return env != nullptr && std::string_view(env) == "1";
    }();
    if (products || !lora.present()) return 0;
    if (w.type != WeightType::bf16 || lora.A.cols != w.cols || lora.B.rows != w.rows || lora.B.cols != lora.A.rows)
      fail("cuda backend: adapter factors A [{}, {}] B [{}, {}] do not fit a [{}, {}] projection", lora.A.rows,
           lora.A.cols, lora.B.rows, lora.B.cols, w.rows, w.cols);
    DeviceMemory& copy = merged_.emplace_back(w.bytes(), "adapter merged into its projection");
    merge_lora(lt_, bf16_of(w), bf16_of(lora.A), bf16_of(lora.B), w.rows, w.cols, lora.A.rows,
               static_cast<bf16*>(copy.ptr), cublas_workspace_.ptr, cublas_workspace_.bytes, stream_);
    lora.merged = w;
    lora.merged.data = copy.ptr;
    return copy.bytes;
  }
  // Images' 3-D rotary positions and the rope delta after them (StepPiece::rope_positions, rope_delta): attention prep
  // reads them from the step's row_rope (attention_prep.cu).
  bool applies_mrope() const override { return true; }

  // Host fp32 rows into BF16 activations, rounded to nearest even as transformers' BF16 embeddings take an image's
  // rows (model/qwen35_forward.cc, scatter_image_rows). Between the embedding and the first layer of a prefill step,
  // never in a graphed one. Synchronous: `in` may be freed when it returns, whatever memory it is in.
  void write_rows(const float* in, int64_t first, int64_t count, Activations& x) override {
    if (mode_ != Mode::eager) fail("cuda backend: rows written into a graphed step");
    if (first < 0 || count < 0 || first + count > x.rows())
      fail("cuda backend: rows [{}, {}) written into activations of {} rows", first, first + count, x.rows());
    if (count == 0) return;
    const size_t mark = used_;
    const int64_t n = count * x.width();
    float* staged = scratch<float>(n);
    check_cuda(cudaMemcpyAsync(staged, in, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, stream_),
               "rows to the GPU");
    timer_.time("write_rows", stream_, [&] { launch_f32_to_bf16(staged, n, data_of(x) + first * x.width(), stream_); });
    check_cuda(cudaStreamSynchronize(stream_), "write_rows");
    used_ = mark;
  }

  // The MTP layer's own steps (model/mtp_forward.cc): [a | b] per row, two strided copies on the step stream; and its
  // fc projection through the sublayers' GEMMs (decode rows on the skinny GEMM, the rest on the pinned one), no
  // adapter. MTP steps write host rows (StepPlan::host_rows), so they are never graphed.
  void concat(const Activations& a, const Activations& b, Activations& out) override {
    if (mode_ != Mode::eager) fail("cuda backend: concat inside a graphed step");
    if (a.rows() != b.rows() || out.rows() != a.rows() || out.width() != a.width() + b.width())
      fail("cuda backend: concat of [{}, {}] and [{}, {}] into [{}, {}]", a.rows(), a.width(), b.rows(), b.width(),
           out.rows(), out.width());
    if (a.rows() == 0) return;
    const size_t e = sizeof(bf16), pitch = static_cast<size_t>(out.width()) * e;
    const auto rows = static_cast<size_t>(a.rows());
    check_cuda(cudaMemcpy2DAsync(data_of(out), pitch, data_of(a), static_cast<size_t>(a.width()) * e,
                                 static_cast<size_t>(a.width()) * e, rows, cudaMemcpyDeviceToDevice, stream_),
               "concat: left");
    check_cuda(cudaMemcpy2DAsync(data_of(out) + a.width(), pitch, data_of(b), static_cast<size_t>(b.width()) * e,
                                 static_cast<size_t>(b.width()) * e, rows, cudaMemcpyDeviceToDevice, stream_),
               "concat: right");
  }
  void project(const Weight& w, const Activations& x, Activations& out) override {
    if (mode_ == Mode::replay) return;  // the step's graph holds these launches
    if (w.cols != x.width() || out.width() != w.rows || out.rows() != x.rows())
      fail("cuda backend: project [{}, {}] by a [{}, {}] weight into [{}, {}]", x.rows(), x.width(), w.rows, w.cols,
           out.rows(), out.width());
    gemm("project", data_of(x), x.rows(), w, LoraFactors{}, data_of(out));
  }

  // The model's M-RoPE streams as attention prep takes them (all 0, the time stream, for a model without M-RoPE: a
  // rope delta alone then shifts every pair alike).
  RopeStreams rope_streams(const AttentionShape& s) const {
    RopeStreams out;
    const auto pairs = static_cast<size_t>(s.rotary_dim / 2);
    if (s.rope_streams.empty()) {
      if (three_d_positions_) fail("cuda attention: 3-D rotary positions for a model without M-RoPE streams");
      return out;
    }
    if (s.rope_streams.size() != pairs || pairs > static_cast<size_t>(kMaxRotaryPairs))
      fail("cuda attention: {} M-RoPE streams for {} rotary dims", s.rope_streams.size(), s.rotary_dim);
    for (size_t i = 0; i < pairs; ++i) {
      if (s.rope_streams[i] < 0 || s.rope_streams[i] > 2) fail("cuda attention: M-RoPE stream {}", s.rope_streams[i]);
      out.stream[i] = static_cast<uint8_t>(s.rope_streams[i]);
    }
    return out;
  }

  // device_rows.h: the step's stream for work on its rows, never inside a capture.
  cudaStream_t stream_for_rows() const {
    if (mode_ != Mode::eager) fail("cuda backend: a step's rows were asked for while the step is graphed");
    return stream_;
  }

  bool has_host_products() const override { return true; }
  void host_products(const float* x, int64_t m, const Weight& w, float* y) override { products_.run(x, m, w, y); }
  void restart_measurements() override {
    check_cuda(cudaStreamSynchronize(stream_), "restart measurements");
    timer_.restart();
  }

  // The sampled rows' logits stay here: computed into the workspace, sampled by the sampling kernel, and only the
  // ids and asked-for logprobs cross to the host.
  void sample_ahead(const Weight& head, const Activations& x, SampledRow* out) override {
    gaps_.sampling();
    const size_t mark = used_;
    const int64_t n = static_cast<int64_t>(samples_.size()), h = x.width(), V = head.rows;
    bf16* selected = scratch<bf16>(n * h);
    float* logits = scratch<float>(n * V);
    if (mode_ != Mode::replay) {
      timer_.time("sample.gather", stream_, [&] {
        launch_gather_rows(data_of(x), static_cast<int32_t>(h), sample_rows_, static_cast<int32_t>(n), selected,
                           stream_);
      });
      // Every sampled row through the skinny GEMM, a prompt's last row too (its bits: the skinny GEMM's, whatever
      // else the step carries): one row's LM head reads the 2 GB head once, where the pinned GEMM took 860 us for it
      // in a 1K prompt's prefill on an H100 (46th round, DUET_PROFILE); DUET_SAMPLE_ROWS_PINNED=1 gives the old split
      // (a prompt's last row on the pinned GEMM), for A/B.
      gemm_split("lm_head", selected, n, prompt_rows_pinned_ ? decode_sample_rows_ : n, head, logits, true);
    }
    const auto free = std::find_if(draws_.begin(), draws_.end(), [](const Draws& d) { return d.out == nullptr; });
    if (free == draws_.end()) fail("cuda backend: a third step's draws while two are still out (finish_sample)");
    // One region for the ids and the top logprobs, so one copy brings both back (sample_readback.h).
    const size_t scratch_bytes = sampling_scratch_bytes(static_cast<int32_t>(n), static_cast<int32_t>(V));
    HeldDraws draws{.draws = &*free,
                    .logits = logits,
                    .rows = n,
                    .vocab = V,
                    .sampling_scratch = scratch<char>(static_cast<int64_t>(scratch_bytes)),
                    .scratch_bytes = scratch_bytes,
                    .results = scratch<char>(static_cast<int64_t>(SampleReadback::device_bytes(n))),
                    .params = sample_params_,
                    .tables = tables_,
                    .masks = masks_,
                    .top_logprobs = top_logprobs_asked_,
                    .mark = mark};
    free->out = out;
    free->logits = logits;
    free->rows = n;
    free->vocab = V;
    last_draws_ = SampleReadback::samples_in(draws.results);  // the next step's carried rows read them here
    last_draw_count_ = n;
    if (masked_.empty()) {
      if (mode_ != Mode::replay) launch_sampler(draws);
      launch_graph();
      fetch_draws(draws);
      return;
    }
    // Issue 19, masks beside the forward: the step's graph (or its eager launches) ends at the logits and goes to
    // the device now; while it runs, the host writes the masks and they go up on their own stream (mask_upload.h);
    // the sampler waits for both. One launch after the graph: a graph of it alone would save nothing.
    launch_graph();
    draws.masked = masked_;
    draws.specs.assign(samples_.begin(), samples_.end());
    draws.mask_words = mask_words_;
    if (hold_masks_) {  // written and drawn by release_masks (a step launched ahead of its masks' grammar states)
      held_ = std::move(draws);
      return;
    }
    draw_masked(draws, true);
  }

  bool holds_masks() const override { return draws_ahead(); }
  void hold_masks(bool on) override { hold_masks_ = on; }

  void release_masks(SampledRow* out) override {
    if (!held_ || held_->draws->out != out) fail("cuda backend: release_masks for draws that are not held");
    HeldDraws draws = std::move(*held_);
    held_.reset();
    draw_masked(draws, true);
  }

  void finish_sample(SampledRow* out) override {
    const auto d = std::find_if(draws_.begin(), draws_.end(), [&](const Draws& x) { return x.out == out; });
    if (out == nullptr || d == draws_.end()) fail("cuda backend: finish_sample for draws that were not made");
    if (held_ && held_->draws == &*d) {  // never released (a step dropped): drawn unmasked, no writer called
      HeldDraws draws = std::move(*held_);
      held_.reset();
      draw_masked(draws, false);
    }
    d->out = nullptr;
    d->readback.wait();
    gaps_.done();
    // The diagnostics read the logits where they are: draws_ahead() is off with them, so no step has begun since.
    if (logits_dump_.on()) logits_dump_.append(d->logits, d->rows, d->vocab);
    for (int64_t i = 0; i < d->rows && slow_rows_.on(); ++i) {
      if (d->readback.sample(i).path & kPathStream)
        slow_rows_.append_row(d->logits + i * d->vocab, d->vocab, sample_params_host_[i]);
    }
    timer_.collect();
    for (int64_t i = 0; i < d->rows; ++i) {
      const DeviceSample& picked_row = d->readback.sample(i);
      if (paths_.on()) paths_.count(picked_row.path, picked_row.ns);
      out[i].id = picked_row.id;
      out[i].logprob = picked_row.logprob;
      out[i].top.clear();
      for (int32_t j = 0; j < picked_row.top_count; ++j) {
        const DeviceTopLogprob& t = d->readback.top(i, j);
        out[i].top.emplace_back(t.id, t.logprob);
      }
    }
    gaps_.returned();
  }

  void sample(const Weight& head, const Activations& x, SampledRow* out) override {
    sample_ahead(head, x, out);
    finish_sample(out);
  }

  // Off with the diagnostics that read a step's device memory after its draws (DUET_PROFILE's timer, the logits
  // dumps): they assume no step begins before the last one's draws are read.
  bool draws_ahead() const override { return !timer_.on() && !logits_dump_.on() && !slow_rows_.on(); }

  void read_rows(const Activations& x, int64_t first, int64_t count, float* out) override {
    const size_t mark = used_;
    const int64_t n = count * x.width();
    float* f = scratch<float>(n);
    timer_.time("read_rows", stream_, [&] { launch_bf16_to_f32(data_of(x) + first * x.width(), n, f, stream_); });
    check_cuda(cudaMemcpyAsync(out, f, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
               "rows to the host");
    check_cuda(cudaStreamSynchronize(stream_), "read_rows");
    timer_.collect();
    used_ = mark;
  }

 private:
  // Ends the capture (if this step made it) and launches the step's graph; nothing when the step runs eagerly.
  void launch_graph() {
    if (mode_ != Mode::eager) graphs_.launch(stream_);
    mode_ = Mode::eager;
  }

  // The draws of the last two steps on their way to the host (sample_ahead, finish_sample): a step begun ahead
  // fetches into the other readback while the host still reads the step before's.
  struct Draws {
    SampleReadback readback;
    SampledRow* out = nullptr;  // null: free
    const float* logits = nullptr;
    int64_t rows = 0, vocab = 0;
  };
  std::array<Draws, 2> draws_;
  // A step's draws between its forward and its sampler: what the sampler's launch reads (the step's own arrays, still
  // in the workspace and the step upload until the next step begins), and for a masked step its masks' places.
  struct MaskedSample {
    size_t sample, offset, words;
  };
  struct HeldDraws {
    Draws* draws = nullptr;
    const float* logits = nullptr;
    int64_t rows = 0, vocab = 0;
    void* sampling_scratch = nullptr;
    size_t scratch_bytes = 0;
    void* results = nullptr;  // SampleReadback's device region
    const SamplingRowParams* params = nullptr;
    PenaltyTables tables;
    const uint32_t* masks = nullptr;
    bool top_logprobs = false;
    size_t mark = 0;  // the workspace's mark before the draws' scratch
    std::vector<MaskedSample> masked;
    std::vector<const SampleSpec*> specs;
    size_t mask_words = 0;
  };
  // Model::launch_holding_masks: the next masked step's draws wait for release_masks (held_).
  bool hold_masks_ = false;
  std::optional<HeldDraws> held_;

  // The sampler's launch for a step's draws.
  void launch_sampler(const HeldDraws& d) {
    timer_.time("sample.kernel", stream_, [&] {
      launch_sample(d.logits, static_cast<int32_t>(d.rows), static_cast<int32_t>(d.vocab), d.params, d.tables,
                    SampleReadback::samples_in(d.results), SampleReadback::top_in(d.results, d.rows),
                    d.sampling_scratch, d.scratch_bytes, stream_, {}, d.masks);
    });
  }

  // The draws' readback enqueued after their sampler, and the workspace given back to the next step's kernels.
  void fetch_draws(const HeldDraws& d) {
    gaps_.enqueued();
    // Two readbacks, so that the step begun ahead fetches into the other while this one's draws wait to be read.
    d.draws->readback.fetch(d.results, d.rows, d.top_logprobs, stream_);
    gaps_.fetched(stream_);
    used_ = d.mark;
  }

  // A masked step's draws after its forward: every masked row's mask written into the staging words (by its
  // MaskWriter, or a given mask copied; with `write` false, a step dropped before its masks were released, every word
  // set and no writer called), in the order of the step's samples, sent on the mask stream, then the sampler (which
  // waits for the copy) and the readback. DUET_TEST_MASKS_AFTER_COPY=1 plants the fault the GPU tests must catch: the
  // copy goes first and the masks are written once it is done, so the sampler reads the last step's masks.
  void draw_masked(const HeldDraws& d, bool write) {
    if (test_masks_after_copy_) {
      mask_upload_.send(d.mask_words, stream_);
      mask_upload_.wait_sent();
    }
    for (const MaskedSample& m : d.masked) {
      const SampleSpec& spec = *d.specs[m.sample];
      const std::span<uint32_t> words = mask_upload_.staging(m.offset, m.words);
      if (!write) {
        std::fill(words.begin(), words.end(), ~0u);
      } else if (spec.mask_writer != nullptr) {
        spec.mask_writer->write(words);
      } else {
        std::memcpy(words.data(), spec.allowed.data(), m.words * sizeof(uint32_t));
      }
    }
    if (!test_masks_after_copy_) mask_upload_.send(d.mask_words, stream_);
    launch_sampler(d);
    mask_upload_.read_by(stream_);
    fetch_draws(d);
  }

  // Bump allocation from the workspace; released by begin_step (and by each sublayer for its own scratch).
  template <typename T>
  T* scratch(int64_t count) {
    const size_t bytes = align_up(static_cast<size_t>(count) * sizeof(T));
    if (used_ + bytes > workspace_.bytes)
      fail("cuda backend: the step needs more than the {} MiB workspace reserved (model workspace_bytes is short)",
           workspace_.bytes >> 20);
    T* p = reinterpret_cast<T*>(static_cast<char*>(workspace_.ptr) + used_);
    used_ += bytes;
    return p;
  }

  // Whether a step's decode rows take the gate | up GEMM with SwiGLU in its epilogue: the two weights stored back to
  // back (resident_together), BF16, the gate's rows a multiple of 64, k of 16, and enough decode rows. The rows' bound
  // is measured (`duet run --streams S`, alternately, H100s): on the register-fed engine (session 45) the epilogue
  // gains 0.9-1.5% at 32, 48 and 64 rows and loses 0.7-3.9% at 1, 2, 4, 12, 16, 20 and 24 (8 gained 2.8%, alone among
  // the small counts), hence kSwigluInGemmMinRows; on the TMA engine (skinny_tma_for, session 48) it gains at every
  // count: 1 stream 150-151 tok/s against 145, 4 streams 588 against 571, 16 streams 2,072 against 2,019.
  // DUET_SKINNY_SWIGLU=0 keeps the two outputs and the SwiGLU kernel at every count, 1 takes the epilogue at every
  // count (the same bits either way; for measurements).
  static constexpr int64_t kSwigluInGemmMinRows = 25;
  bool swiglu_in_gemm(const MlpWeights& w, int64_t decode) const {
    static const char* env = std::getenv("DUET_SKINNY_SWIGLU");
    const Weight &gate = w.gate_proj, &up = w.up_proj;
    const bool fits = gate.type == WeightType::bf16 && up.type == WeightType::bf16 && gate.rows == up.rows &&
                      gate.cols == up.cols && gate.rows % 64 == 0 && gate.cols % 16 == 0 &&
                      static_cast<const char*>(gate.data) + gate.bytes() == up.data;
    if (!fits || decode < 1) return false;
    if (env != nullptr && std::string_view(env) == "0") return false;
    if (env != nullptr && std::string_view(env) == "1") return true;
    return decode >= kSwigluInGemmMinRows ||
           skinny_tma_for(static_cast<int32_t>(2 * gate.rows), static_cast<int32_t>(gate.cols));
  }
  // A projection y = x w^T (BF16 out) for the step's rows: the first decode_rows_ through the skinny GEMM, the rest
  // through the pinned one, with the adapter on the adapted rows (prefill_rows).
  void gemm(const char* name, const bf16* x, int64_t rows, const Weight& w, const LoraFactors& lora, bf16* y) {
    const int64_t decode = std::min<int64_t>(decode_rows_, rows);
    gemm_split(name, x, decode, decode, w, y, false);
    prefill_rows(name, x, rows, decode, w, lora, y);
  }
  // Rows [decode, rows) of a projection through the pinned GEMM, with the adapter where it applies: the adapted
  // pieces' rows over the merged weight (merge_adapter) and the others over W, each range on its own (the pinned GEMM
  // gives a row the same bits wherever a launch is cut); without a merged copy, all rows over W, then adapt().
  void prefill_rows(const char* name, const bf16* x, int64_t rows, int64_t decode, const Weight& w,
                    const LoraFactors& lora, bf16* y) {
    const bool adapted = lora.present() && adapted_count_ > 0;
    if (!adapted || lora.merged.data == nullptr || !adapted_in_prefill_) {
      pinned_rows(name, x, rows, decode, w, y, false);
      if (adapted) adapt(name, x, w, lora, y);
      return;
    }
    int64_t at = decode;
    for (auto [first, last] : adapted_ranges_) {
      first = std::clamp(first, at, rows);
      last = std::clamp(last, first, rows);
      pinned_rows(name, x, first, at, w, y, false);
      pinned_rows(name, x, last, first, lora.merged, y, false);
      at = last;
    }
    pinned_rows(name, x, rows, at, w, y, false);
  }
  // y[r] = bf16(y[r] + (x[r] A^T) B^T) for the adapted rows r. The rows are gathered so that no other row passes
  // through the adapter, and both products run on pinned GEMMs (tensor cores): x A^T rounded to BF16 (the input of
  // the second GEMM), (x A^T) B^T in fp32, added to the projection's BF16 output and rounded once more. Every
  // operation is per row with an algorithm fixed per shape, so an adapted row's bits do not depend on the step.
  void adapt(const char* name, const bf16* x, const Weight& w, const LoraFactors& lora, bf16* y) {
    const int64_t n = adapted_count_, in = lora.A.cols, rank = lora.A.rows, out = lora.B.rows;
    if (in != w.cols || out != w.rows || lora.B.cols != rank)
      fail("cuda backend: adapter factors A [{}, {}] B [{}, {}] do not fit {} [{}, {}]", rank, in, out, lora.B.cols,
           name, w.rows, w.cols);
    const size_t mark = used_;
    bf16* gathered = scratch<bf16>(n * in);
    bf16* low = scratch<bf16>(n * rank);
    float* delta = scratch<float>(n * out);
    timer_.time(
        name, stream_,
        [&] {
          launch_gather_rows(x, static_cast<int32_t>(in), adapted_rows_, static_cast<int32_t>(n), gathered, stream_);
          pinned_gemm(rank, in, false).run(gathered, n, bf16_of(lora.A), low, stream_);
          pinned_gemm(out, rank, true).run(low, n, bf16_of(lora.B), delta, stream_);
          launch_add_rows(delta, static_cast<int32_t>(out), adapted_rows_, static_cast<int32_t>(n), y, stream_);
        },
        " adapter");
    used_ = mark;
  }
  // Projections of the same input x: when they are stored back to back (resident_together), the decode rows of all
  // of them are one skinny GEMM writing each projection's own output; the prefill rows and the adapters go as for
  // one projection. Every output has the bits of its own call either way.
  struct Projection {
    const char* name;
    const Weight& w;
    const LoraFactors& lora;
    bf16* y;
  };
  void gemm_together(const char* name, const bf16* x, int64_t rows, std::initializer_list<Projection> projections) {
    const int64_t decode = std::min<int64_t>(decode_rows_, rows);
    SkinnyOutputs out;
    bool together = decode > 0 && projections.size() <= SkinnyOutputs::kMaxSegments;
    const char* next = nullptr;
    int64_t n = 0;
    int segment = 0;
    for (const Projection& p : projections) {
      together = together && p.w.type == WeightType::bf16 && p.w.cols == projections.begin()->w.cols &&
                 p.w.cols % 16 == 0 && (next == nullptr || p.w.data == next);
      next = static_cast<const char*>(p.w.data) + p.w.bytes();
      if (together) {
        out.y[segment] = p.y;
        out.first[segment++] = static_cast<int32_t>(n);
      }
      n += p.w.rows;
    }
    if (!together) {
      for (const Projection& p : projections) gemm(p.name, x, rows, p.w, p.lora, p.y);
      return;
    }
    out.segments = segment;
    out.first[segment] = static_cast<int32_t>(n);
    const Weight& first = projections.begin()->w;
    timer_.time(
        name, stream_,
        [&] {
          launch_skinny_gemm_segments(x, static_cast<int32_t>(decode), bf16_of(first), static_cast<int32_t>(n),
                                      static_cast<int32_t>(first.cols), out, false, stream_);
        },
        " skinny");
    for (const Projection& p : projections) prefill_rows(p.name, x, rows, decode, p.w, p.lora, p.y);
  }
  void gemm_split(const char* name, const bf16* x, int64_t rows, int64_t decode_rows, const Weight& w, void* y,
                  bool y_f32) {
    const int64_t n = w.rows, k = w.cols;
    if (decode_rows > 0)
      timer_.time(
          name, stream_,
          [&] {
            launch_skinny_gemm(x, static_cast<int32_t>(decode_rows), bf16_of(w), static_cast<int32_t>(n),
                               static_cast<int32_t>(k), y, y_f32, stream_);
          },
          " skinny");
    pinned_rows(name, x, rows, decode_rows, w, y, y_f32);
  }
  // Rows [decode_rows, rows) of y = x w^T through the pinned cuBLASLt GEMM, in launches of at most kPinnedMaxRows
  // rows (a step may carry more: `duet run --streams 64` prefills 64 prompts at once). The pinned algorithm gives a row
  // the same bits whatever m is (pinned_gemm.h), so where a step is cut changes nothing.
  void pinned_rows(const char* name, const bf16* x, int64_t rows, int64_t decode_rows, const Weight& w, void* y,
                   bool y_f32) {
    const int64_t n = w.rows, k = w.cols;
    const size_t out_size = y_f32 ? sizeof(float) : sizeof(bf16);
    for (int64_t first = decode_rows; first < rows; first += kPinnedMaxRows) {
      const int64_t count = std::min(kPinnedMaxRows, rows - first);
      PinnedGemm& pinned = pinned_gemm(n, k, y_f32);
      // cuBLASLt needs 16-byte aligned operands. The prefill rows' output starts first * n elements in, which is
      // misaligned when n is small and odd-sized steps mix roles (a tiny model's n = 4): compute those rows into
      // aligned scratch and copy them into place.
      char* out = static_cast<char*>(y) + static_cast<size_t>(first * n) * out_size;
      const size_t mark = used_;
      const size_t bytes = static_cast<size_t>(count * n) * out_size;
      char* target = reinterpret_cast<uintptr_t>(out) % 16 == 0 ? out : scratch<char>(static_cast<int64_t>(bytes));
      timer_.time(
          name, stream_, [&] { pinned.run(x + first * k, count, bf16_of(w), target, stream_); }, " pinned");
      if (target != out)
        check_cuda(cudaMemcpyAsync(out, target, bytes, cudaMemcpyDeviceToDevice, stream_), "aligned GEMM rows");
      used_ = mark;
    }
  }
  PinnedGemm& pinned_gemm(int64_t n, int64_t k, bool y_f32) {
    auto key = std::make_tuple(n, k, y_f32);
    auto it = pinned_.find(key);
    if (it == pinned_.end())
      it = pinned_
               .emplace(key, std::make_unique<PinnedGemm>(lt_, n, k, kPinnedMaxRows, y_f32, cublas_workspace_.ptr,
                                                          cublas_workspace_.bytes))
               .first;
    return *it->second;
  }

  OpTimer timer_;                                      // DUET_PROFILE=1: GPU time per operation, printed at exit
  LogitsDump logits_dump_{"DUET_DUMP_LOGITS"};         // the first N sampled rows' logits, for bench_sampling --logits
  LogitsDump slow_rows_{"DUET_DUMP_SLOW_ROWS"};        // rows only the stream path decided, with their parameters
  std::vector<SamplingRowParams> sample_params_host_;  // this step's, kept only for slow_rows_
  bool top_logprobs_asked_ = false;  // this step: a row asked for top logprobs (they come back only then)
  // Where the last step's sampler left its draws (scratch of the workspace, untouched until the next step's kernels),
  // for the next step's carried rows; null when it may not be read.
  const DeviceSample* last_draws_ = nullptr;
  int64_t last_draw_count_ = 0;
  SamplingPaths paths_;    // DUET_SAMPLING_PATHS=1: how the sampler decided its rows, printed at exit
  StepGaps gaps_;          // DUET_STEP_GAPS=1: the host's share of a step's wall time, printed at exit
  HostProducts products_;  // a decision head's products, beside the steps
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceMemory cublas_workspace_;
  std::map<const void*, DeviceMemory> resident_;  // host address of a weight -> its device copy
  std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<PinnedGemm>> pinned_;
  DeviceMemory workspace_;
  size_t used_ = 0;
  // The current step.
  StepUpload upload_;
  DeviceStep step_;
  int64_t step_gdn_layers_ = 0;  // the step's state storage's GDN layers (the last one launches the deferred folds)
  int64_t chunk_scratch_ = 0;    // floats of delta-rule chunk scratch per value head this step needs
  const int32_t* ids_ = nullptr;
  const int32_t* logit_rows_ = nullptr;
  const int32_t* sample_rows_ = nullptr;
  const int32_t* adapted_rows_ = nullptr;  // rows of adapted pieces, ascending
  int32_t adapted_count_ = 0;
  std::vector<std::pair<int64_t, int64_t>> adapted_ranges_;  // [first, last) rows of adapted pieces, ascending
  bool adapted_in_prefill_ = false;                          // all of them past the decode rows
  std::vector<DeviceMemory> merged_;                         // merge_adapter's copies
  const SamplingRowParams* sample_params_ = nullptr;
  PenaltyTables tables_;  // this step's counts (the storage's), extra ids and biases (plan arrays)
  // The counts address the captured graphs hold (a kernel argument): another forgets them (begin_step).
  const uint32_t* graphed_counts_ = nullptr;
  // This step's token masks: which samples have one and where (SamplingRowParams::mask_offset, in words), their words
  // in all, and the device words the sampler reads (null when no row is masked).
  std::vector<MaskedSample> masked_;
  size_t mask_words_ = 0;
  MaskUpload mask_upload_;
  const uint32_t* masks_ = nullptr;
  // The most rows of a piece the GDN decode kernels take, a row at a time (delta_chunks.h: a verify piece's last token
  // and drafts; docs/mtp.md). DUET_VERIFY_ROWS=chunked gives every piece of several rows to the chunked form and the
  // two-kernel conv instead, as before: the same bits, for comparing the two on the GPU.
  const int32_t decode_piece_rows_ = [] {
    const char* v = std::getenv("DUET_VERIFY_ROWS");
    if (v == nullptr || *v == 0 || std::string_view(v) == "decode") return kDecodePieceRows;
    if (std::string_view(v) == "chunked") return int32_t{1};
    fail("DUET_VERIFY_ROWS={}: expected decode (the default) or chunked", v);
  }();
  const bool test_masks_after_copy_ = [] {
    const char* fault = std::getenv("DUET_TEST_MASKS_AFTER_COPY");  // a planted fault, for the GPU tests only
    return fault != nullptr && std::string_view(fault) == "1";
  }();
  std::span<const SampleSpec* const> samples_;
  int64_t decode_sample_rows_ = 0;
  const bool prompt_rows_pinned_ = [] {
    const char* v = std::getenv("DUET_SAMPLE_ROWS_PINNED");
    return v != nullptr && std::string_view(v) == "1";
  }();
  int64_t rows_ = 0;
  int64_t decode_rows_ = 0;
  bool three_d_positions_ = false;  // some piece of the step carries 3-D rotary positions (not only a delta)
  int64_t decode_logit_rows_ = 0;
  int32_t logit_row_count_ = 0;
  // Decode steps as CUDA graphs: off with DUET_CUDA_GRAPHS=0, and while profiling (per-launch events) or dumping.
  enum class Mode { eager, capture, replay };
  bool graphs_on_ = graphs_wanted();
  StepGraphs graphs_;
  Mode mode_ = Mode::eager;

  // Every value a graphed decode step's launches take besides the weights and the step's counts: a graph captured
  // with other values must not replay (StepGraphs checks, and refuses loudly instead of computing wrong tokens). The
  // masks' address is not one: no graph reads it (a masked step's sampler runs outside its graph).
  std::vector<uintptr_t> graph_arguments() const {
    auto address = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    return {address(workspace_.ptr),
            address(step_.piece),
            address(step_.row_piece),
            address(step_.row_position),
            address(step_.row_rope),
            address(step_.page_table),
            address(step_.chunk),
            address(step_.piece_order),
            address(step_.chunk_order),
            static_cast<uintptr_t>(step_.pieces),
            static_cast<uintptr_t>(step_.rows),
            static_cast<uintptr_t>(step_.chunks),
            static_cast<uintptr_t>(step_.multi_pieces),
            static_cast<uintptr_t>(step_.multi_chunks),
            static_cast<uintptr_t>(step_.few_pieces),
            static_cast<uintptr_t>(step_.fold_pieces),
            address(ids_),
            address(logit_rows_),
            address(sample_rows_),
            address(sample_params_),
            address(tables_.counts),
            address(tables_.extra_ids),
            address(tables_.biases),
            static_cast<uintptr_t>(decode_rows_),
            static_cast<uintptr_t>(decode_sample_rows_)};
  }

  bool graphs_wanted() const {
    const char* graphs = std::getenv("DUET_CUDA_GRAPHS");
    const char* dump = std::getenv("DUET_DUMP");
    return !timer_.on() && !(graphs != nullptr && std::string_view(graphs) == "0") && !(dump != nullptr && *dump);
  }
};

}  // namespace

const bf16* device_rows_of(const Activations& x) { return data_of(x); }

cudaStream_t step_stream_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) fail("the {} backend has no CUDA stream", backend.name());
  return cuda->stream_for_rows();
}

}  // namespace cuda

// A device this build can run on: the kernels are built for sm_90a only, so `auto` falls back to the CPU on any
// other GPU instead of refusing to start.
bool cuda_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    fail("--backend cuda: no CUDA device is available on this machine");
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace duet::backend
