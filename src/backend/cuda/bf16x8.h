#pragma once
// Eight BF16 values in one 16-byte vector, to and from fp32: the elementwise kernels' chunks and a row norm's
// (row_norm_chunk.h).
#include <cuda_bf16.h>

#include <cstdint>

namespace duet::backend::cuda {

constexpr int kBf16x8 = 8;

union Bf16x8 {
  uint4 raw;
  __nv_bfloat162 pair[4];
  __nv_bfloat16 v[kBf16x8];
};

__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  Bf16x8 p;
  p.raw = raw;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p.pair[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float* in) {
  Bf16x8 p;
#pragma unroll
  for (int i = 0; i < 4; ++i) p.pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  return p.raw;
}

}  // namespace duet::backend::cuda
