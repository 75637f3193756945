// The GEMM of decode rows: y[m, n] = sum_k x[m, k] * w[n, k] for small m (1..64 typical, any m works), BF16 in, fp32
// accumulation, BF16 or fp32 out. Its CPU twin is cpu::matmul (matmul.cc).
//
// Batch invariance (architecture.md, "Row invariance"): an output element's bits depend only on its x row and w row.
//  - k is cut into 16-byte chunks of 8 elements. Lane l of a warp owns chunks l, l + 32, l + 64, ... and adds them
//    into one fp32 partial sum in increasing chunk order, the 8 products of a chunk in element order (one fma each).
//  - The 32 lane partials are summed in one fixed pairwise tree.
// Neither depends on m, on the row's place among the m rows, or on the row tile below, so a row computed alone
// equals, bit for bit, the same row computed among 255 others.
//
// Work split: a warp owns kCols adjacent output columns (w rows) and walks k in segments of kSegChunks chunks per
// lane. Per segment it loads its w chunks once (16-byte loads, 512 contiguous bytes per warp per column; w is not
// kept in L1) and then runs every x row of the current row tile over them, x coming from L1/L2. The partial sums of
// all rows of the tile live in shared memory ([row][col][lane], one slot per lane, so no synchronisation is needed
// until the final reduction). Up to kTileRows rows read w once; more rows take further tiles that re-read w (from
// L2 when it fits). Bandwidth tuning (more columns per warp, x staged in shared memory, tensor cores for m >= 16)
// comes later and must keep the chunk-to-lane assignment and the reduction tree above.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kWarps = 4;       // warps per block
constexpr int kCols = 2;        // output columns per warp
constexpr int kSegChunks = 4;   // 16-byte chunks per lane per segment (kSegChunks * kCols loads in flight per lane)
constexpr int kTileRows = 32;   // x rows per pass over w
constexpr int kLaneSlots = 33;  // 32 lane partials per (row, column), padded so the reduction reads are conflict-free
constexpr int kChunk = 8;       // BF16 per 16-byte chunk

void refuse(const char* what) { check_cuda(cudaErrorInvalidValue, what); }

// A streamed weight chunk: read once per launch (per row tile), so it bypasses L1 and leaves it to x.
__device__ __forceinline__ uint4 load_weight_chunk(const bf16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The two BF16 of a 32-bit word as fp32 (exact: a BF16 is the top half of a float).
__device__ __forceinline__ float low_bf16(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float high_bf16(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// The 8 BF16 of a chunk as fp32.
__device__ __forceinline__ void widen(const uint4& v, float* f) {
  f[0] = low_bf16(v.x), f[1] = high_bf16(v.x), f[2] = low_bf16(v.y), f[3] = high_bf16(v.y);
  f[4] = low_bf16(v.z), f[5] = high_bf16(v.z), f[6] = low_bf16(v.w), f[7] = high_bf16(v.w);
}

// One level of the fixed reduction tree (constant indices keep v in registers).
template <int kWidth>
__device__ __forceinline__ void pairwise_sum_step(float* v) {
#pragma unroll
  for (int i = 0; i < kWidth; ++i) v[i] += v[i + kWidth];
}

template <bool kOutF32>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const bf16* __restrict__ x, int32_t m, const bf16* __restrict__ w, int32_t n, int32_t k,
                       void* __restrict__ y) {
  extern __shared__ float partials[];  // [kWarps][min(m, kTileRows)][kCols][kLaneSlots]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t col0 = (blockIdx.x * kWarps + warp) * kCols;
  if (col0 >= n) return;  // no block-wide synchronisation below, so idle warps may leave
  const int tile_capacity = min(m, kTileRows);
  float* mine = partials + static_cast<int64_t>(warp) * tile_capacity * kCols * kLaneSlots;
  const int32_t chunks = k / kChunk;

  // Columns past n read column col0's row (always valid) and are never written.
  const bf16* wrow[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) wrow[j] = w + static_cast<int64_t>(col0 + j < n ? col0 + j : col0) * k;

  for (int32_t r0 = 0; r0 < m; r0 += kTileRows) {
    const int rows = min(kTileRows, m - r0);
    for (int p = 0; p < rows * kCols; ++p) mine[p * kLaneSlots + lane] = 0.0f;

    for (int32_t seg = 0; seg < chunks; seg += 32 * kSegChunks) {
      // The segment's w chunks, loaded together (kCols * kSegChunks loads in flight) and widened once for all rows.
      uint4 wraw[kCols][kSegChunks];
#pragma unroll
      for (int i = 0; i < kSegChunks; ++i) {
        const int32_t c = seg + i * 32 + lane;
#pragma unroll
        for (int j = 0; j < kCols; ++j)
          wraw[j][i] =
              c < chunks ? load_weight_chunk(wrow[j] + static_cast<int64_t>(c) * kChunk) : make_uint4(0, 0, 0, 0);
      }
      float wf[kCols][kSegChunks][kChunk];
#pragma unroll
      for (int j = 0; j < kCols; ++j)
#pragma unroll
        for (int i = 0; i < kSegChunks; ++i) widen(wraw[j][i], wf[j][i]);

      for (int r = 0; r < rows; ++r) {
        const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r0 + r) * k);
        float acc[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) acc[j] = mine[(r * kCols + j) * kLaneSlots + lane];
#pragma unroll
        for (int i = 0; i < kSegChunks; ++i) {
          const int32_t c = seg + i * 32 + lane;
          if (c < chunks) {  // past the end of k: nothing to read or add
            float xf[kChunk];
            widen(__ldg(xr + c), xf);
            // The chunk's 8 products in element order, one fma each (exact products: BF16 x BF16 fits in fp32).
#pragma unroll
            for (int j = 0; j < kCols; ++j)
#pragma unroll
              for (int e = 0; e < kChunk; ++e) acc[j] = __fmaf_rn(xf[e], wf[j][i][e], acc[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kCols; ++j) mine[(r * kCols + j) * kLaneSlots + lane] = acc[j];
      }
    }
    __syncwarp();

    // Lane p % 32 sums the 32 partials of (row, column) pair p with a fixed pairwise tree.
    for (int p = lane; p < rows * kCols; p += 32) {
      const float* slot = mine + p * kLaneSlots;
      float v[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = slot[i];
      pairwise_sum_step<16>(v);
      pairwise_sum_step<8>(v);
      pairwise_sum_step<4>(v);
      pairwise_sum_step<2>(v);
      pairwise_sum_step<1>(v);
      const int32_t col = col0 + p % kCols;
      if (col < n) {
        const int64_t at = static_cast<int64_t>(r0 + p / kCols) * n + col;
        if constexpr (kOutF32) {
          static_cast<float*>(y)[at] = v[0];
        } else {
          static_cast<bf16*>(y)[at] = __float2bfloat16_rn(v[0]);
        }
      }
    }
    __syncwarp();  // the next tile overwrites the partials just read
  }
}

}  // namespace

void launch_skinny_gemm(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, void* y, bool y_f32,
                        cudaStream_t stream) {
  if (m < 0 || n < 0) refuse("launch_skinny_gemm: negative m or n");
  if (m == 0 || n == 0) return;
  if (k <= 0 || k % kChunk != 0) refuse("launch_skinny_gemm: k must be a positive multiple of 8");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0)
    refuse("launch_skinny_gemm: x and w must be 16-byte aligned");
  const int cols_per_block = kWarps * kCols;
  const unsigned grid = static_cast<unsigned>((static_cast<int64_t>(n) + cols_per_block - 1) / cols_per_block);
  // At most 4 * 32 * 2 * 33 * 4 = 33 KiB: under the 48 KiB that needs no opt-in.
  const size_t smem = sizeof(float) * kWarps * std::min(m, kTileRows) * kCols * kLaneSlots;
  if (y_f32) {
    skinny_gemm_kernel<true><<<grid, kWarps * 32, smem, stream>>>(x, m, w, n, k, y);
  } else {
    skinny_gemm_kernel<false><<<grid, kWarps * 32, smem, stream>>>(x, m, w, n, k, y);
  }
  check_launch("launch_skinny_gemm");
}

}  // namespace duet::backend::cuda
