#pragma once
// One 8-value chunk of a row norm (launch_rms_norm, launch_add_rms_norm): its weight, the residual add and its
// rounding, the chain of squares, the output. The norm kernels (elementwise.cu) and the GEMM that norms its own input
// in its prologue (skinny_gemm_tma.cu, launch_skinny_gemm_tma_normed) take them from here, so that the two give the
// same bits by construction; only the reduction over the chunks is each kernel's (the latter plays the former's).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/bf16x8.h"

namespace duet::backend::cuda {

// The weight's values [first, first + 8), zeros past `width` when not `vec` (16-byte aligned, width % 8 == 0).
template <bool kWeightF32>
__device__ __forceinline__ void load_weight8(const void* w, int64_t first, int32_t width, bool vec, float* out) {
  if (kWeightF32) {
    const float* wf = static_cast<const float*>(w) + first;
    if (vec) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(wf));
      const float4 b = __ldg(reinterpret_cast<const float4*>(wf) + 1);
      out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < kBf16x8; ++e) out[e] = first + e < width ? wf[e] : 0.0f;
    }
  } else {
    const __nv_bfloat16* wb = static_cast<const __nv_bfloat16*>(w) + first;
    if (vec) {
      unpack8(__ldg(reinterpret_cast<const uint4*>(wb)), out);
    } else {
#pragma unroll
      for (int e = 0; e < kBf16x8; ++e) out[e] = first + e < width ? __bfloat162float(wb[e]) : 0.0f;
    }
  }
}

// The chunk of x, plus delta's (nullptr: none) rounded to BF16 as add_kernel rounds: the BF16 values, and as floats
// in v (what the norm squares and scales).
__device__ __forceinline__ uint4 added_chunk(const __nv_bfloat16* x, const __nv_bfloat16* delta, float* v) {
  uint4 raw = *reinterpret_cast<const uint4*>(x);
  unpack8(raw, v);
  if (delta != nullptr) {
    float d[kBf16x8];
    unpack8(*reinterpret_cast<const uint4*>(delta), d);
#pragma unroll
    for (int e = 0; e < kBf16x8; ++e) v[e] += d[e];
    raw = pack8(v);
    unpack8(raw, v);
  }
  return raw;
}

// sum + the chunk's squares, one fma each in element order.
__device__ __forceinline__ float chunk_squares(const float* v, float sum) {
#pragma unroll
  for (int e = 0; e < kBf16x8; ++e) sum = __fmaf_rn(v[e], v[e], sum);
  return sum;
}

// 1 / sqrt(mean square + eps) as the CPU reference (norms.cc) computes it; IEEE sqrt and division (no fast-math).
__device__ __forceinline__ float inverse_rms(float sum, int32_t width, float eps) {
  return 1.0f / sqrtf(sum / static_cast<float>(width) + eps);
}

// The norm's output chunk: (v * inv) * scale, rounded to BF16.
__device__ __forceinline__ uint4 normed_chunk(const float* v, float inv, const float* scale) {
  float y[kBf16x8];
#pragma unroll
  for (int e = 0; e < kBf16x8; ++e) y[e] = (v[e] * inv) * scale[e];
  return pack8(y);
}

}  // namespace duet::backend::cuda
