#include "model/cuda/device_vision_tower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "backend/cpu/weight_rows.h"
#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::model::cuda {

using backend::cuda::align_up;
using backend::cuda::check_cublas;
using backend::cuda::check_cuda;
using backend::cuda::PinnedGemm;

struct DeviceVisionTower::Gemms {
  std::unique_ptr<PinnedGemm> patch, qkv, proj, fc1, fc2, merger_fc1, merger_fc2;
};

namespace {

// cuBLASLt's scratch for the tower's GEMMs (the backend's own is apart: the tower runs on its own stream).
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
// Every GEMM is pinned for this many rows and larger ones run in launches of at most this many (as the backend's):
// the algorithms do not depend on the size a tower was made for, so a test's small tower computes the served one's
// bits.
constexpr int64_t kPinnedRows = 32768;

// y[m, n] = x[m, k] w[n, k]^T in launches of at most kPinnedRows rows (each row's bits the same in any of them).
void gemm(PinnedGemm& pinned, const bf16* x, int64_t m, const bf16* w, float* y, cudaStream_t stream) {
  for (int64_t first = 0; first < m; first += kPinnedRows)
    pinned.run(x + first * pinned.k(), std::min(kPinnedRows, m - first), w, y + first * pinned.n(), stream);
}

// The tower's tensors laid out in one device allocation: each checked and given its place first, then copied up one
// by one (the BF16 ones straight from the checkpoint's mapping, the widened ones through a host row of floats).
class ResidentLayout {
 public:
  void linear(const backend::Weight& w, const std::string& name, int64_t out, int64_t in, const bf16** slot) {
    if (w.type != backend::WeightType::bf16)
      fail(
          "{}: F32; the vision tower on the GPU multiplies BF16 weights as stored (DUET_DEVICE_VISION=0 runs the "
          "tower on the host)",
          name);
    check_count(w, name, out * in);
    const size_t at = place(static_cast<size_t>(out * in) * sizeof(bf16));
    copies_.push_back({at, w, false});
    fixups_.push_back([slot, at](const uint8_t* base) { *slot = reinterpret_cast<const bf16*>(base + at); });
  }
  void widened(const backend::Weight& w, const std::string& name, int64_t count, const float** slot) {
    check_count(w, name, count);
    const size_t at = place(static_cast<size_t>(count) * sizeof(float));
    copies_.push_back({at, w, true});
    fixups_.push_back([slot, at](const uint8_t* base) { *slot = reinterpret_cast<const float*>(base + at); });
  }
  size_t bytes() const { return end_; }
  void upload(void* device) const {
    auto* base = static_cast<uint8_t*>(device);
    std::vector<float> row;
    for (const Copy& c : copies_) {
      const int64_t count = c.weight.rows * c.weight.cols;
      if (c.widen) {
        row.resize(static_cast<size_t>(count));
        backend::cpu::weight_to_float(c.weight, 0, count, row.data());
        check_cuda(cudaMemcpy(base + c.offset, row.data(), row.size() * sizeof(float), cudaMemcpyHostToDevice),
                   "vision tower: weights up");
      } else {
        check_cuda(cudaMemcpy(base + c.offset, c.weight.data, c.weight.bytes(), cudaMemcpyHostToDevice),
                   "vision tower: weights up");
      }
    }
    for (const auto& fix : fixups_) fix(base);
  }

 private:
  struct Copy {
    size_t offset;
    backend::Weight weight;
    bool widen;
  };
  static void check_count(const backend::Weight& w, const std::string& name, int64_t count) {
    if (w.data == nullptr || w.rows * w.cols != count)
      fail("{}: {} values bound, the vision tower on the GPU expects {}", name, w.rows * w.cols, count);
  }
  size_t place(size_t bytes) {
    const size_t at = end_;
    end_ = align_up(end_ + bytes);
    return at;
  }
  size_t end_ = 0;
  std::vector<Copy> copies_;
  std::vector<std::function<void(const uint8_t*)>> fixups_;
};

void lay_out_linear(ResidentLayout& layout, const VisionLinear& from, const std::string& name, int64_t out, int64_t in,
                    DeviceVisionLinear& to) {
  layout.linear(from.weight, name + ".weight", out, in, &to.weight);
  layout.widened(from.bias, name + ".bias", out, &to.bias);
}
void lay_out_norm(ResidentLayout& layout, const VisionLayerNorm& from, const std::string& name, int64_t width,
                  DeviceVisionNorm& to) {
  layout.widened(from.weight, name + ".weight", width, &to.weight);
  layout.widened(from.bias, name + ".bias", width, &to.bias);
}

}  // namespace

DeviceVisionTower::DeviceVisionTower(const VisionConfig& config, const VisionWeights& weights, int64_t max_patches)
    : config_(config), max_patches_(max_patches) {
  const int64_t h = config_.hidden_size, d = config_.head_dim();
  if (!frame_attention_supports(static_cast<int32_t>(d)))
    fail(
        "vision tower on the GPU: heads of {} (hidden_size {} / num_heads {}); its attention is compiled for 16, 32, "
        "64, 72 and 80 (DUET_DEVICE_VISION=0 runs the tower on the host)",
        d, h, config_.num_heads);
  for (const auto& [what, size] : {std::pair<const char*, int64_t>{"hidden_size", h},
                                   {"intermediate_size", config_.intermediate_size},
                                   {"out_hidden_size", config_.out_hidden_size},
                                   {"a patch row (channels x temporal patch x patch^2)", config_.patch_row_size()}})
    if (size <= 0 || size % 8 != 0)
      fail("vision tower on the GPU: {} is {}, not a multiple of 8 (cuBLASLt's 16-byte BF16 rows)", what, size);
  if (static_cast<int64_t>(weights.blocks.size()) != config_.depth)
    fail("vision tower on the GPU: {} blocks bound, config says {}", weights.blocks.size(), config_.depth);
  if (max_patches_ < config_.merge_group() || max_patches_ > (int64_t{1} << 24))
    fail("vision tower on the GPU: sized for {} patches (at least {}, at most 2^24)", max_patches_,
         config_.merge_group());

  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "vision tower: stream");
  try {
    check_cublas(cublasLtCreate(&handle_), "vision tower: cublasLtCreate");
    upload_weights(weights);
    plan_scratch();
    gemm_workspace_ = backend::cuda::DeviceMemory(kGemmWorkspaceBytes, "vision tower: GEMM workspace");
    const int64_t merged = config_.merged_size();
    auto pin = [&](int64_t n, int64_t k) {
      return std::make_unique<PinnedGemm>(handle_, n, k, kPinnedRows, true, gemm_workspace_.ptr, gemm_workspace_.bytes);
    };
    gemms_ = std::make_unique<Gemms>();
    gemms_->patch = pin(h, config_.patch_row_size());
    gemms_->qkv = pin(3 * h, h);
    gemms_->proj = pin(h, h);
    gemms_->fc1 = pin(config_.intermediate_size, h);
    gemms_->fc2 = pin(h, config_.intermediate_size);
    gemms_->merger_fc1 = pin(merged, merged);
    gemms_->merger_fc2 = pin(config_.out_hidden_size, merged);
  } catch (...) {
    gemms_.reset();
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceVisionTower::~DeviceVisionTower() {
  gemms_.reset();  // before the handle they were made with
  if (handle_ != nullptr) cublasLtDestroy(handle_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void DeviceVisionTower::upload_weights(const VisionWeights& w) {
  const int64_t h = config_.hidden_size, f = config_.intermediate_size, m = config_.merged_size();
  const std::string prefix = "model.visual.";
  ResidentLayout layout;
  DeviceVisionWeights& to = weights_;
  lay_out_linear(layout, w.patch_embed, prefix + "patch_embed.proj", h, config_.patch_row_size(), to.patch_embed);
  layout.widened(w.pos_embed, prefix + "pos_embed.weight", config_.num_position_embeddings * h, &to.pos_embed);
  to.blocks.resize(w.blocks.size());
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const std::string b = prefix + "blocks." + std::to_string(i) + ".";
    const VisionBlockWeights& from = w.blocks[i];
    DeviceVisionBlock& block = to.blocks[i];
    lay_out_norm(layout, from.norm1, b + "norm1", h, block.norm1);
    lay_out_norm(layout, from.norm2, b + "norm2", h, block.norm2);
    lay_out_linear(layout, from.qkv, b + "attn.qkv", 3 * h, h, block.qkv);
    lay_out_linear(layout, from.proj, b + "attn.proj", h, h, block.proj);
    lay_out_linear(layout, from.fc1, b + "mlp.linear_fc1", f, h, block.fc1);
    lay_out_linear(layout, from.fc2, b + "mlp.linear_fc2", h, f, block.fc2);
  }
  lay_out_norm(layout, w.merger_norm, prefix + "merger.norm", h, to.merger_norm);
  lay_out_linear(layout, w.merger_fc1, prefix + "merger.linear_fc1", m, m, to.merger_fc1);
  lay_out_linear(layout, w.merger_fc2, prefix + "merger.linear_fc2", config_.out_hidden_size, m, to.merger_fc2);
  weights_memory_ = backend::cuda::DeviceMemory(layout.bytes(), "vision tower: weights on the device");
  layout.upload(weights_memory_.ptr);
}

void DeviceVisionTower::plan_scratch() {
  const auto p = static_cast<size_t>(max_patches_);
  const auto h = static_cast<size_t>(config_.hidden_size), f = static_cast<size_t>(config_.intermediate_size),
             row = static_cast<size_t>(config_.patch_row_size()), d = static_cast<size_t>(config_.head_dim()),
             group = static_cast<size_t>(config_.merge_group());
  // Per patch: the merger's fc1 output [N / 4, 4 hidden] is N x hidden (fits `wide`), its GELU N x hidden (fits
  // `wide_bf16`), its rows [N / 4, out] fit `out` at out / 4 a patch.
  const size_t wide = std::max({3 * h, f, row}), wide_bf16 = std::max({f, row, h}),
               out = std::max(h, (static_cast<size_t>(config_.out_hidden_size) + group - 1) / group);
  size_t end = 0;
  auto place = [&](size_t bytes) {
    const size_t at = end;
    end = align_up(end + bytes);
    return at;
  };
  const size_t x_at = place(p * h * sizeof(float)), normed_at = place(p * h * sizeof(bf16)),
               wide_at = place(p * wide * sizeof(float)), wide_bf16_at = place(p * wide_bf16 * sizeof(bf16)),
               out_at = place(p * out * sizeof(float)), index_at = place(p * 4 * sizeof(int32_t)),
               weight_at = place(p * 4 * sizeof(float)), cos_at = place(p * d * sizeof(float)),
               sin_at = place(p * d * sizeof(float));
  scratch_memory_ = backend::cuda::DeviceMemory(end, "vision tower: scratch on the device");
  auto* base = static_cast<uint8_t*>(scratch_memory_.ptr);
  scratch_.x = reinterpret_cast<float*>(base + x_at);
  scratch_.normed = reinterpret_cast<bf16*>(base + normed_at);
  scratch_.wide = reinterpret_cast<float*>(base + wide_at);
  scratch_.wide_bf16 = reinterpret_cast<bf16*>(base + wide_bf16_at);
  scratch_.out = reinterpret_cast<float*>(base + out_at);
  scratch_.tap_index = reinterpret_cast<int32_t*>(base + index_at);
  scratch_.tap_weight = reinterpret_cast<float*>(base + weight_at);
  scratch_.cos = reinterpret_cast<float*>(base + cos_at);
  scratch_.sin = reinterpret_cast<float*>(base + sin_at);
}

std::vector<std::string> DeviceVisionTower::describe_gemms() const {
  return {"patch_embed " + gemms_->patch->describe(),
          "qkv " + gemms_->qkv->describe(),
          "proj " + gemms_->proj->describe(),
          "fc1 " + gemms_->fc1->describe(),
          "fc2 " + gemms_->fc2->describe(),
          "merger fc1 " + gemms_->merger_fc1->describe(),
          "merger fc2 " + gemms_->merger_fc2->describe()};
}

// One image's run (model/vision_run.h): the host's share (checks, position taps, rotary tables) made here, before it
// takes the tower; each stage then runs on the tower's stream and waits for it.
class DeviceVisionRun final : public VisionRun {
 public:
  DeviceVisionRun(DeviceVisionTower& tower, const float* pixel_values, const VisionGrid& grid,
                  const VisionPatchPlaces& places, VisionTrace* trace)
      : VisionRun(static_cast<int32_t>(tower.config_.depth) + 2),
        tower_(tower),
        pixel_values_(pixel_values),
        n_(grid.patches()),
        frame_rows_(grid.h * grid.w),
        trace_(trace) {
    const VisionConfig& c = tower.config_;
    check_vision_grid(c, grid);
    if (n_ > tower.max_patches_)
      fail("vision tower on the GPU: an image of {} patches; it was sized for at most {}", n_, tower.max_patches_);
    if (static_cast<int64_t>(places.table.size()) != n_ || static_cast<int64_t>(places.rotary.size()) != n_)
      fail("vision tower on the GPU: {} and {} patch places for {} patches", places.table.size(), places.rotary.size(),
           n_);
    // The positions as the host tower computes them (the same functions), sent up with the pixels.
    taps_ = position_taps(c, grid, places.table);
    for (const int32_t index : taps_.index)  // the kernel reads the table at them unchecked
      if (index < 0 || index >= c.num_position_embeddings)
        fail("vision tower on the GPU: a patch place reads position {} of a table of {}", index,
             c.num_position_embeddings);
    rope_ = vision_rotary(c, places.rotary);
    lock_ = std::unique_lock(tower.mutex_);
  }

 private:
  void run(int32_t stage) override {
    if (stage == 0) {
      tower_.embed(pixel_values_, n_, taps_, rope_, trace_);
      pixel_values_ = nullptr;
    } else if (stage <= tower_.config_.depth) {
      tower_.block_forward(tower_.weights_.blocks[static_cast<size_t>(stage - 1)], n_, frame_rows_);
    } else {
      tower_.merge(n_, rows_);
    }
    tower_.finish_stage();
  }

  DeviceVisionTower& tower_;
  const float* pixel_values_;
  int64_t n_, frame_rows_;
  VisionTrace* trace_;
  PositionTaps taps_;
  VisionRotary rope_;
  std::unique_lock<std::mutex> lock_;
};

std::unique_ptr<VisionRun> DeviceVisionTower::start(const float* pixel_values, const VisionGrid& grid,
                                                    VisionTrace* trace) {
  check_vision_grid(config_, grid);
  VisionPatchPlaces places;
  places.table = patch_positions(grid, config_.spatial_merge_size);
  places.rotary = places.table;
  return start_at(pixel_values, grid, places, trace);
}

std::unique_ptr<VisionRun> DeviceVisionTower::start_at(const float* pixel_values, const VisionGrid& grid,
                                                       const VisionPatchPlaces& places, VisionTrace* trace) {
  return std::make_unique<DeviceVisionRun>(*this, pixel_values, grid, places, trace);
}

std::vector<float> DeviceVisionTower::rows(const float* pixel_values, const VisionGrid& grid, VisionTrace* trace) {
  std::unique_ptr<VisionRun> run = start(pixel_values, grid, trace);
  while (!run->done()) run->run_stage();
  return run->take_rows();
}

std::vector<float> DeviceVisionTower::rows_at(const float* pixel_values, const VisionGrid& grid,
                                              const VisionPatchPlaces& places, VisionTrace* trace) {
  std::unique_ptr<VisionRun> run = start_at(pixel_values, grid, places, trace);
  while (!run->done()) run->run_stage();
  return run->take_rows();
}

void DeviceVisionTower::copy_down(const float* from, int64_t count, std::vector<float>& to) {
  to.resize(static_cast<size_t>(count));
  check_cuda(cudaMemcpyAsync(to.data(), from, to.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "vision tower: rows down");
  finish_stage();
}

void DeviceVisionTower::finish_stage() { check_cuda(cudaStreamSynchronize(stream_), "vision tower: a run"); }

void DeviceVisionTower::embed(const float* pixel_values, int64_t n, const PositionTaps& taps, const VisionRotary& rope,
                              VisionTrace* trace) {
  const int64_t h = config_.hidden_size, row = config_.patch_row_size();
  const Scratch& s = scratch_;
  auto up = [&](void* to, const void* from, size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream_), "vision tower: inputs up");
  };
  up(s.wide, pixel_values, static_cast<size_t>(n * row) * sizeof(float));
  up(s.tap_index, taps.index.data(), taps.index.size() * sizeof(int32_t));
  up(s.tap_weight, taps.weight.data(), taps.weight.size() * sizeof(float));
  up(s.cos, rope.cos.data(), rope.cos.size() * sizeof(float));
  up(s.sin, rope.sin.data(), rope.sin.size() * sizeof(float));

  const auto width = static_cast<int32_t>(h);
  launch_round_to_bf16(s.wide, n * row, s.wide_bf16, stream_);
  gemm(*gemms_->patch, s.wide_bf16, n, weights_.patch_embed.weight, s.x, stream_);
  launch_add_bias(s.x, n, width, weights_.patch_embed.bias, stream_);
  if (trace != nullptr) copy_down(s.x, n * h, trace->patch_embed);
  launch_add_positions(s.x, n, width, weights_.pos_embed, s.tap_index, s.tap_weight, stream_);
  if (trace != nullptr) copy_down(s.x, n * h, trace->pos_added);
}

// The merger: LayerNorm per patch; the 2x2 groups' rows are contiguous, so [N, hidden] is already [N / 4, 4 hidden].
void DeviceVisionTower::merge(int64_t n, std::vector<float>& rows) {
  const Scratch& s = scratch_;
  const auto width = static_cast<int32_t>(config_.hidden_size);
  const int64_t tokens = n / config_.merge_group(), merged = config_.merged_size(), out = config_.out_hidden_size;
  launch_layer_norm(s.x, n, width, weights_.merger_norm.weight, weights_.merger_norm.bias, config_.layer_norm_eps,
                    s.normed, stream_);
  gemm(*gemms_->merger_fc1, s.normed, tokens, weights_.merger_fc1.weight, s.wide, stream_);
  launch_bias_gelu(s.wide, tokens, static_cast<int32_t>(merged), weights_.merger_fc1.bias, Gelu::erf, s.wide_bf16,
                   stream_);
  gemm(*gemms_->merger_fc2, s.wide_bf16, tokens, weights_.merger_fc2.weight, s.out, stream_);
  launch_add_bias(s.out, tokens, static_cast<int32_t>(out), weights_.merger_fc2.bias, stream_);
  copy_down(s.out, tokens * out, rows);
}

void DeviceVisionTower::block_forward(const DeviceVisionBlock& b, int64_t n, int64_t frame_rows) {
  const Scratch& s = scratch_;
  const auto h = static_cast<int32_t>(config_.hidden_size), f = static_cast<int32_t>(config_.intermediate_size),
             d = static_cast<int32_t>(config_.head_dim()), heads = static_cast<int32_t>(config_.num_heads);
  const float eps = config_.layer_norm_eps;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));  // as the host tower's
  // x += proj(attention(rope2d(qkv(LayerNorm1(x)))))
  launch_layer_norm(s.x, n, h, b.norm1.weight, b.norm1.bias, eps, s.normed, stream_);
  gemm(*gemms_->qkv, s.normed, n, b.qkv.weight, s.wide, stream_);
  launch_qkv_bias_rotary(s.wide, n, h, d, b.qkv.bias, s.cos, s.sin, stream_);
  launch_frame_attention(s.wide, n, frame_rows, heads, d, scale, s.normed, stream_);
  gemm(*gemms_->proj, s.normed, n, b.proj.weight, s.out, stream_);
  launch_add_bias_residual(s.x, s.out, n, h, b.proj.bias, stream_);
  // x += fc2(gelu_tanh(fc1(LayerNorm2(x))))
  launch_layer_norm(s.x, n, h, b.norm2.weight, b.norm2.bias, eps, s.normed, stream_);
  gemm(*gemms_->fc1, s.normed, n, b.fc1.weight, s.wide, stream_);
  launch_bias_gelu(s.wide, n, f, b.fc1.bias, Gelu::tanh, s.wide_bf16, stream_);
  gemm(*gemms_->fc2, s.wide_bf16, n, b.fc2.weight, s.out, stream_);
  launch_add_bias_residual(s.x, s.out, n, h, b.fc2.bias, stream_);
}

}  // namespace duet::model::cuda
