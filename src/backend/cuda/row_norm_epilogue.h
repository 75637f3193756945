#pragma once
// The residual add and row norm after a decode GEMM, done by the GEMM's last block instead of a kernel of its own
// (RowNorm in kernels.h; launch_skinny_gemm_tma_norm). Why: at one row a step is 261 kernels and a small kernel costs
// about 2 us of the GPU's time whatever it does, mostly the boundary (the previous grid finishing, this one's wait
// returning); the 64 norms were 4% of a one-row step (docs/benchmarks.md, 36th round).
//
// The same bits as launch_add_rms_norm (rms_norm_chunk_kernel, one 8-value chunk a thread): the norm kernel's T
// threads (RowNorm::threads) are played by this block's warps, each taking whole virtual warps of 32 lanes, so that
// every virtual thread's chunk, its fma chain, the xor butterfly inside each virtual warp and the butterfly over the
// T / 32 warp sums are the kernel's own, in its order.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/bf16x8.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

constexpr int kNormMaxVirtualWarps = 16;  // 512 threads: widths up to 4,096 at one chunk a thread

// Whether this block is the launch's last to finish: every thread's stores are made visible device-wide first, then
// one thread counts the block in. The last block sees every other block's stores (the counter's order).
__device__ __forceinline__ bool last_block_done(unsigned* finished, int* flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned total = gridDim.x * gridDim.y * gridDim.z;
    const bool last = atomicAdd(finished, 1u) == total - 1;
    if (last) *finished = 0;  // ready for the next launch (a replayed graph's too)
    *flag = last;
  }
  __syncthreads();
  const bool last = *flag != 0;
  if (last) __threadfence();
  return last;
}

// x[r] += delta[r] and out[r] = the norm of x[r], rows [0, rows), by the whole block (blockDim.x a multiple of 32).
// `scratch` holds kNormMaxVirtualWarps + 1 floats. Preconditions (the launcher's): width % 8 == 0, width / 8 <=
// norm.threads <= 512, the arrays 16-byte aligned.
template <int kPerWarp>
__device__ void add_rms_norm_rows(const RowNorm& norm, const bf16* delta, int rows, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int virtual_warps = norm.threads / 32;
  const int chunks = norm.width / kBf16x8;
  float scale[kPerWarp][kBf16x8];
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    const int c = (warp + j * warps) * 32 + lane;
    if (warp + j * warps < virtual_warps && c < chunks) {
      const int64_t first = static_cast<int64_t>(c) * kBf16x8;
      if (norm.w_f32) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(norm.w) + first));
        const float4 b = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(norm.w) + first) + 1);
        const float wv[kBf16x8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < kBf16x8; ++e) scale[j][e] = norm.one_plus ? 1.0f + wv[e] : wv[e];
      } else {
        float wv[kBf16x8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(static_cast<const bf16*>(norm.w) + first)), wv);
#pragma unroll
        for (int e = 0; e < kBf16x8; ++e) scale[j][e] = norm.one_plus ? 1.0f + wv[e] : wv[e];
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    bf16* xr = norm.x + static_cast<int64_t>(r) * norm.width;
    const bf16* dr = delta + static_cast<int64_t>(r) * norm.width;
    float v[kPerWarp][kBf16x8];
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const int vw = warp + j * warps, c = vw * 32 + lane;
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < kBf16x8; ++e) v[j][e] = 0.0f;
      if (vw < virtual_warps && c < chunks) {
        const int64_t first = static_cast<int64_t>(c) * kBf16x8;
        float d[kBf16x8];
        unpack8(*reinterpret_cast<const uint4*>(xr + first), v[j]);
        unpack8(*reinterpret_cast<const uint4*>(dr + first), d);
#pragma unroll
        for (int e = 0; e < kBf16x8; ++e) v[j][e] += d[e];
        const uint4 rounded = pack8(v[j]);
        *reinterpret_cast<uint4*>(xr + first) = rounded;
        unpack8(rounded, v[j]);
#pragma unroll
        for (int e = 0; e < kBf16x8; ++e) sum = __fmaf_rn(v[j][e], v[j][e], sum);
      }
      // The norm kernel's first stage (block_sum): the xor butterfly over the virtual warp's 32 lanes.
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (vw < virtual_warps && lane == 0) scratch[vw] = sum;
    }
    __syncthreads();
    if (warp == 0) {  // its second stage: the butterfly over the virtual warps' sums (none with one virtual warp)
      float total = lane < virtual_warps ? scratch[lane] : 0.0f;
      for (int offset = virtual_warps / 2; offset > 0; offset >>= 1)
        total += __shfl_xor_sync(0xffffffffu, total, offset);
      if (lane == 0) scratch[kNormMaxVirtualWarps] = total;
    }
    __syncthreads();
    const float inv = 1.0f / sqrtf(scratch[kNormMaxVirtualWarps] / static_cast<float>(norm.width) + norm.eps);
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const int c = (warp + j * warps) * 32 + lane;
      if (warp + j * warps < virtual_warps && c < chunks) {
        float y[kBf16x8];
#pragma unroll
        for (int e = 0; e < kBf16x8; ++e) y[e] = (v[j][e] * inv) * scale[j][e];
        *reinterpret_cast<uint4*>(norm.out + static_cast<int64_t>(r) * norm.width + static_cast<int64_t>(c) * kBf16x8) =
            pack8(y);
      }
    }
    __syncthreads();  // scratch is read before the next row writes it
  }
}

}  // namespace duet::backend::cuda
