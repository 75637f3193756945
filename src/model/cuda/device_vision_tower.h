#pragma once
// The vision tower on the GPU (issue 21): the device twin of the host tower (model/vision_tower.h), one image at a
// time. Its weights are made resident once, the linear layers' BF16 as stored and the rest (biases, LayerNorms, the
// position table) widened exactly to fp32; it has a stream, a cuBLASLt handle and scratch of its own, sized once for
// the largest image it takes, so a run allocates nothing.
//
//   x = bf16(pixel_values) · patch_embed^T + b          fp32 [N, hidden]      PinnedGemm, then add_bias
//   x += positions (host-computed taps)                 fp32                  add_positions
//   depth times:
//     q, k, v = bf16(LN1(x)) · qkv^T + b, 2-D rotary    fp32 [N, 3 hidden]    layer_norm, PinnedGemm, qkv_bias_rotary
//     x += bf16(attention(q, k, v)) · proj^T + b        per frame, fp32       frame_attention, PinnedGemm
//     x += bf16(gelu_tanh(bf16(LN2(x)) · fc1^T + b)) · fc2^T + b
//   y = bf16(LN(x)) seen as [N / 4, 4 hidden]           (the 2x2 groups are contiguous rows)
//   out = bf16(gelu_erf(y · fc1^T + b)) · fc2^T + b     fp32 [N / 4, out_hidden_size], copied to the host
//
// Every GEMM is a PinnedGemm (one cuBLASLt algorithm per shape for every m, pinned for 32768 rows whatever the tower's
// size, a larger image's in launches of that many) and every kernel is row-wise or works within a frame in a fixed
// order: an image's rows are the same bits whatever ran before it, and whatever size the tower was made for. Rounding
// happens only at the GEMMs' inputs (model::VisionRounding::linear_inputs_bf16 is its host yardstick).
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/pinned_gemm.h"
#include "model/cuda/vision_kernels.h"
#include "model/vision_tower.h"

namespace duet::model::cuda {

struct DeviceVisionLinear {
  const bf16* weight = nullptr;  // [out, in] as stored
  const float* bias = nullptr;   // [out]
};
struct DeviceVisionNorm {
  const float* weight = nullptr;  // [width]
  const float* bias = nullptr;    // [width]
};
struct DeviceVisionBlock {
  DeviceVisionNorm norm1, norm2;  // [hidden]
  DeviceVisionLinear qkv;         // [3 hidden, hidden]
  DeviceVisionLinear proj;        // [hidden, hidden]
  DeviceVisionLinear fc1;         // [intermediate, hidden]
  DeviceVisionLinear fc2;         // [hidden, intermediate]
};
struct DeviceVisionWeights {
  DeviceVisionLinear patch_embed;    // [hidden, C*T*P*P]
  const float* pos_embed = nullptr;  // [num_position_embeddings, hidden]
  std::vector<DeviceVisionBlock> blocks;
  DeviceVisionNorm merger_norm;               // [hidden]
  DeviceVisionLinear merger_fc1, merger_fc2;  // [4 hidden, 4 hidden], [out_hidden_size, 4 hidden]
};

class DeviceVisionTower {
 public:
  // Uploads `weights` (read only here: the caller may unmap them after), pins the GEMMs and reserves the scratch of an
  // image of `max_patches` patches. Refuses (duet::Error, naming the tensor or the size) a linear weight that is not
  // BF16, a width that is not a multiple of 8 (cuBLASLt's 16-byte rows) and a head size the attention is not compiled
  // for.
  DeviceVisionTower(const VisionConfig& config, const VisionWeights& weights, int64_t max_patches);
  ~DeviceVisionTower();
  DeviceVisionTower(const DeviceVisionTower&) = delete;
  DeviceVisionTower& operator=(const DeviceVisionTower&) = delete;

  // One image: pixel_values [grid.patches(), patch row] (fp32, as the processor makes them) in, its rows
  // [grid.patches() / 4, out_hidden_size] out, as model::vision_forward. Blocks until they are on the host.
  // Thread-safe (runs are serialised); throws duet::Error on a grid over max_patches() or one the config refuses.
  std::vector<float> rows(const float* pixel_values, const VisionGrid& grid, VisionTrace* trace = nullptr);
  // The same with the patch places given (tests plant wrong ones, as model::vision_forward_at).
  std::vector<float> rows_at(const float* pixel_values, const VisionGrid& grid, const VisionPatchPlaces& places,
                             VisionTrace* trace = nullptr);
  // The same image a stage at a time (model/vision_run.h), the same bits: the run holds the tower (its scratch) from
  // here to its destruction, so another rows() or start() waits for it; create and destroy it on one thread. Each stage
  // returns once the device has run it. `pixel_values` must stay valid until the first stage has run.
  std::unique_ptr<VisionRun> start(const float* pixel_values, const VisionGrid& grid, VisionTrace* trace = nullptr);
  std::unique_ptr<VisionRun> start_at(const float* pixel_values, const VisionGrid& grid,
                                      const VisionPatchPlaces& places, VisionTrace* trace = nullptr);

  int64_t max_patches() const { return max_patches_; }
  size_t weight_bytes() const { return weights_memory_.bytes; }
  size_t scratch_bytes() const { return scratch_memory_.bytes + gemm_workspace_.bytes; }
  // The pinned cuBLASLt configuration of each GEMM, one line each (logs, benchmarks).
  std::vector<std::string> describe_gemms() const;

 private:
  struct Gemms;
  // Device buffers of one image of up to max_patches_ patches, carved out of scratch_memory_.
  struct Scratch {
    float* x = nullptr;            // [N, hidden] the residual stream
    bf16* normed = nullptr;        // [N, hidden] LayerNorm outputs, the attention's output
    float* wide = nullptr;         // [N, max(3 hidden, intermediate, patch row)] qkv, fc1's output, pixels up
    bf16* wide_bf16 = nullptr;     // [N, max(intermediate, patch row)] GELU outputs, BF16 pixels
    float* out = nullptr;          // [N, max(hidden, out / 4)] proj's and fc2's outputs, the merger's rows
    int32_t* tap_index = nullptr;  // [N, 4]
    float* tap_weight = nullptr;   // [N, 4]
    float* cos = nullptr;          // [N, head_dim]
    float* sin = nullptr;          // [N, head_dim]
  };
  friend class DeviceVisionRun;
  void upload_weights(const VisionWeights& weights);
  void plan_scratch();
  // The run's stages: the embedding (inputs up, patch embedding, positions), a block, the merger (rows down).
  void embed(const float* pixel_values, int64_t n, const PositionTaps& taps, const VisionRotary& rope,
             VisionTrace* trace);
  void block_forward(const DeviceVisionBlock& block, int64_t n, int64_t frame_rows);
  void merge(int64_t n, std::vector<float>& rows);
  void copy_down(const float* from, int64_t count, std::vector<float>& to);
  void finish_stage();  // waits for the stream

  VisionConfig config_;
  int64_t max_patches_;
  std::mutex mutex_;  // one image at a time through the scratch (a run holds it)
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  backend::cuda::DeviceMemory weights_memory_, scratch_memory_, gemm_workspace_;
  DeviceVisionWeights weights_;
  Scratch scratch_;
  std::unique_ptr<Gemms> gemms_;
};

}  // namespace duet::model::cuda
