// The gated RMSNorm of GDN (launch_gdn_gated_norm in kernels.h), one warp per (row, value head).
//
// Rounding points follow transformers' Qwen3_5RMSNormGated on a BF16 model: the normalized value is cast back to
// BF16, multiplied by the weight (a BF16 product there, so rounded here), then by silu(z) in fp32, and rounded once
// more. The mean of squares is reduced in a fixed order (per lane in index order, then a fixed butterfly), so a
// head's result depends only on its own values.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

__device__ __forceinline__ float weight_at(const DeviceWeight& w, int64_t i) {
  return w.f32 ? static_cast<const float*>(w.data)[i] : __bfloat162float(static_cast<const bf16*>(w.data)[i]);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Sum over the warp; every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__global__ void __launch_bounds__(kThreads) gated_norm_kernel(const float* o, const bf16* z, DeviceWeight w, float eps,
                                                              int64_t vectors, int32_t dim, bf16* out) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int64_t vector = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (vector >= vectors) return;  // the whole warp leaves together, so the shuffles below see full warps
  const int64_t base = vector * dim;
  float sum_squares = 0.0f;
  for (int32_t i = lane; i < dim; i += 32) sum_squares = fmaf(o[base + i], o[base + i], sum_squares);
  const float inv_rms = rsqrtf(warp_sum(sum_squares) / static_cast<float>(dim) + eps);
  for (int32_t i = lane; i < dim; i += 32) {
    const float normalized = round_bf16(o[base + i] * inv_rms);
    const float weighted = round_bf16(weight_at(w, i) * normalized);
    out[base + i] = __float2bfloat16(weighted * silu(__bfloat162float(z[base + i])));
  }
}

}  // namespace

void launch_gdn_gated_norm(const float* o, const bf16* z, DeviceWeight w, float eps, int64_t rows, int32_t heads,
                           int32_t dim, bf16* out, cudaStream_t stream) {
  const int64_t vectors = rows * heads;  // heads are contiguous, so (row, head) is vector row * heads + head
  if (vectors <= 0 || dim <= 0) return;
  const int64_t blocks = (vectors + kWarps - 1) / kWarps;
  launch_dependent("gated_norm_kernel", gated_norm_kernel, static_cast<uint32_t>(blocks), kThreads, 0, stream, o, z, w,
                   eps, vectors, dim, out);
  check_launch("gdn gated_norm_kernel");
}

}  // namespace duet::backend::cuda
