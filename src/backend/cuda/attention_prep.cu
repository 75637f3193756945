// Attention prep: per row, the (1+w) RMSNorm and partial RoPE of every query head (in place in q_gate) and of every
// key head (written into the row's page slot), and the value copied unchanged into its page slot.
//
// One warp per head, kPrepWarps heads (of the row's q_heads + kv_heads) per block, so a decode row's 20 heads run on
// 5 SMs at once instead of one after another on one. Each block computes the RoPE table of its row's rotary
// positions (cos/sin for each rotary pair) itself. Every value depends on its own row only, so the result is row
// invariant by construction.
//
// Rotary positions (docs/vision.md 5): a text-only step has no DeviceStep::row_rope and every pair rotates at the row's
// sequence position. A step with images or a rope delta carries each row's (time, height, width) positions, and pair
// i reads the one RopeStreams names; a text row there has three equal positions, so its angles, and its bits, are
// the ones the first form gives at that position. K and V still go to the row's sequence position.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kPrepWarps = 4;
constexpr int kPrepThreads = kPrepWarps * 32;
constexpr int kMaxHeadDim = 512;  // the per-warp head buffer in shared memory

__device__ __forceinline__ float weight_value(const DeviceWeight& w, int i) {
  return w.f32 ? static_cast<const float*>(w.data)[i] : __bfloat162float(static_cast<const bf16*>(w.data)[i]);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// A row's rotary positions: (time, height, width), all three its sequence position in a text-only step.
struct RowRope {
  int32_t time, height, width;
  __device__ int32_t of_stream(int stream) const { return stream == 0 ? time : stream == 1 ? height : width; }
};

// cos/sin of each rotary pair i < rotary_dim / 2 at the angle of the position pair i reads (streams), spelled as the
// CPU reference (attention_mixer.cc) and transformers compute them: the exponent and inv_freq in fp32,
// theta^exponent in double rounded to fp32, angle = inv_freq * position in fp32, cos/sin of the fp32 angle rounded to
// fp32 and then to BF16 (transformers casts cos/sin to the activation dtype before rotating).
__device__ void rope_table(RowRope rope, const RopeStreams& streams, int32_t rotary_dim, float theta, float* cos_out,
                           float* sin_out) {
  const int half = rotary_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float exponent = __fdiv_rn(static_cast<float>(2 * i), static_cast<float>(rotary_dim));
    const float base_power = static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
    const float inv_freq = __fdiv_rn(1.0f, base_power);
    const int32_t position = rope.of_stream(streams.stream[i]);
    const float angle = __fmul_rn(inv_freq, static_cast<float>(position));
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    cos_out[i] = __bfloat162float(__float2bfloat16(static_cast<float>(c)));
    sin_out[i] = __bfloat162float(__float2bfloat16(static_cast<float>(s)));
  }
}

// One head of head_dim values, by one warp: (1+w) RMSNorm with fp32 statistics rounded to BF16, then RoPE on
// [0, rotary_dim) rounded to BF16 once. `src` and `dst` may alias: every read lands in `buf` before any write.
__device__ void norm_rope_head(const bf16* src, bf16* dst, const DeviceWeight& w, int head_dim, int rotary_dim,
                               float eps, const float* cos_t, const float* sin_t, float* buf) {
  const int lane = threadIdx.x & 31;
  float sum_sq = 0.0f;
  for (int i = lane; i < head_dim; i += 32) {
    const float x = __bfloat162float(src[i]);
    buf[i] = x;
    sum_sq = __fmaf_rn(x, x, sum_sq);
  }
  sum_sq = warp_sum(sum_sq);
  const float mean_sq = __fdiv_rn(sum_sq, static_cast<float>(head_dim));
  const float inv_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, eps)));
  for (int i = lane; i < head_dim; i += 32) {
    const float y = __fmul_rn(__fmul_rn(buf[i], inv_rms), __fadd_rn(1.0f, weight_value(w, i)));
    buf[i] = __bfloat162float(__float2bfloat16(y));
  }
  __syncwarp();
  const int half = rotary_dim / 2;
  for (int i = lane; i < head_dim; i += 32) {
    float y = buf[i];
    // The products of BF16 values are exact in fp32, so each rotated value is rounded in the subtraction or
    // addition and then once to BF16, whatever the compiler does about contraction.
    if (i < half) {
      y = __fsub_rn(__fmul_rn(buf[i], cos_t[i]), __fmul_rn(buf[i + half], sin_t[i]));
    } else if (i < rotary_dim) {
      const int j = i - half;
      y = __fadd_rn(__fmul_rn(buf[i], cos_t[j]), __fmul_rn(buf[j], sin_t[j]));
    }
    dst[i] = __float2bfloat16(y);
  }
  __syncwarp();  // buf is reused by the warp's next head
}

// kEarlyTable (DUET_CUDA_EARLY_LOADS=1, dependent_launch.h): the RoPE table before the wait, in the previous kernel's
// tail (its double-precision pow and sincos are the block's longest chain); the step's arrays it reads came with the
// step's upload, before the step's first kernel.
template <bool kEarlyTable = false>
__global__ void __launch_bounds__(kPrepThreads)
    attention_prep_kernel(DeviceStep step, int32_t layer, bf16* q_gate, const bf16* k, const bf16* v,
                          DeviceWeight q_norm, DeviceWeight k_norm, AttentionDims dims, RopeStreams streams) {
  if constexpr (!kEarlyTable) {
    wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
    let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  }
  __shared__ float cos_t[kMaxHeadDim / 2];
  __shared__ float sin_t[kMaxHeadDim / 2];
  __shared__ float head_buf[kPrepWarps][kMaxHeadDim];
  const int row = blockIdx.x;
  const int32_t position = step.row_position[row];
  const DevicePiece piece = step.piece[step.row_piece[row]];
  const int hd = dims.head_dim;
  const RowRope rope = step.row_rope == nullptr
                           ? RowRope{position, position, position}
                           : RowRope{step.row_rope[3 * row], step.row_rope[3 * row + 1], step.row_rope[3 * row + 2]};
  rope_table(rope, streams, dims.rotary_dim, dims.rope_theta, cos_t, sin_t);
  __syncthreads();
  if constexpr (kEarlyTable) {
    wait_for_prerequisites();
    let_dependents_launch();
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* buf = head_buf[warp];
  const int head = blockIdx.y * kPrepWarps + warp;
  if (head < dims.q_heads) {
    bf16* query = q_gate + (static_cast<int64_t>(row) * dims.q_heads + head) * 2 * hd;
    norm_rope_head(query, query, q_norm, hd, dims.rotary_dim, dims.norm_eps, cos_t, sin_t, buf);
  } else if (head < dims.q_heads + dims.kv_heads) {
    const int h = head - dims.q_heads;
    const int64_t offset = (static_cast<int64_t>(row) * dims.kv_heads + h) * hd;
    bf16* key_slot = kv_key(piece, step.page_table, layer, position, h, dims.kv_heads, hd);
    bf16* value_slot = kv_value(piece, step.page_table, layer, position, h, dims.kv_heads, hd);
    norm_rope_head(k + offset, key_slot, k_norm, hd, dims.rotary_dim, dims.norm_eps, cos_t, sin_t, buf);
    for (int i = lane; i < hd; i += 32) value_slot[i] = v[offset + i];
  }
}

}  // namespace

void launch_attention_prep(const DeviceStep& step, int32_t attn_layer, bf16* q_gate, const bf16* k, const bf16* v,
                           DeviceWeight q_norm, DeviceWeight k_norm, AttentionDims dims, cudaStream_t stream,
                           const RopeStreams& streams) {
  static_assert(kMaxHeadDim / 2 <= kMaxRotaryPairs, "a rotary pair without a stream");
  if (dims.head_dim <= 0 || dims.head_dim > kMaxHeadDim || dims.rotary_dim < 0 || dims.rotary_dim % 2 != 0 ||
      dims.rotary_dim > dims.head_dim || dims.q_heads <= 0 || dims.kv_heads <= 0) {
    check_cuda(cudaErrorInvalidValue, "launch_attention_prep: head_dim must be 1..512 and rotary_dim even <= head_dim");
  }
  for (int i = 0; i < dims.rotary_dim / 2; ++i)
    if (streams.stream[i] > 2) check_cuda(cudaErrorInvalidValue, "launch_attention_prep: a rotary stream above 2");
  if (step.rows <= 0) return;
  const unsigned head_blocks = static_cast<unsigned>((dims.q_heads + dims.kv_heads + kPrepWarps - 1) / kPrepWarps);
  launch_dependent("attention_prep_kernel", early_loads() ? attention_prep_kernel<true> : attention_prep_kernel<false>,
                   dim3(step.rows, head_blocks), kPrepThreads, 0, stream, step, attn_layer, q_gate, k, v, q_norm,
                   k_norm, dims, streams);
  check_launch("attention_prep_kernel");
}

}  // namespace duet::backend::cuda
