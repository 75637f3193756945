#pragma once
// The gated RMSNorm of one value head (`dim` values) by one warp, for the .cu files that compute it (gdn_norm.cu over
// every row, gdn_delta_rule.cu's decode kernel for its own rows). One definition, so both give the same bits.
//
// Rounding points follow transformers' Qwen3_5RMSNormGated on a BF16 model: the normalized value is cast back to
// BF16, multiplied by the weight (a BF16 product there, so rounded here), then by silu(z) in fp32, and rounded once
// more. The mean of squares is reduced in a fixed order (lane l adds elements l, l + 32, ... in order, then a fixed
// butterfly), so a head's result depends only on its own values.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

// o: the head's fp32 values (global or shared memory), z and out: its BF16 gate and output.
__device__ __forceinline__ void gated_norm_head(const float* o, const bf16* z, const DeviceWeight& w, float eps,
                                                int32_t dim, bf16* out) {
  const int lane = threadIdx.x % 32;
  float sum_squares = 0.0f;
  for (int32_t i = lane; i < dim; i += 32) sum_squares = fmaf(o[i], o[i], sum_squares);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
  const float inv_rms = rsqrtf(sum_squares / static_cast<float>(dim) + eps);
  for (int32_t i = lane; i < dim; i += 32) {
    const float normalized = __bfloat162float(__float2bfloat16(o[i] * inv_rms));
    const float weight =
        w.f32 ? static_cast<const float*>(w.data)[i] : __bfloat162float(static_cast<const bf16*>(w.data)[i]);
    const float weighted = __bfloat162float(__float2bfloat16(weight * normalized));
    const float zf = __bfloat162float(z[i]);
    out[i] = __float2bfloat16(weighted * (zf / (1.0f + expf(-zf))));
  }
}

}  // namespace duet::backend::cuda
