// The GEMM of decode rows: y[m, n] = sum_k x[m, k] * w[n, k] for small m (1..64 typical, any m works), BF16 in, fp32
// accumulation, BF16 or fp32 out. Its CPU twin is cpu::matmul (matmul.cc).
//
// Batch invariance (architecture.md, "Row invariance"): an output element's bits depend only on its x row and w row,
// never on m, on the other rows, or on the row's place among them. Two kernels keep it, each with its own fixed
// order; a shape always takes the same one whatever m is (the choice depends on k alone). A third, the tensor-core
// kernel's twin with wgmma (skinny_gemm_regs_kernel, below: the weights in registers as A, x from shared memory as B),
// sums the same k16 groups in the same order and gives the same bits (measured), so a launch of any m may take it:
// the plans give it the shapes and row counts where it reads faster (skinny_regs_choice.h).
//
// Tensor cores (k % 16 == 0, every Qwen3.5 shape). mma.sync m16n8k16, BF16 in, fp32 accumulators: w rows are the
// MMA's 16-row A operand, x rows its 8-column B operand, so one n8 tile holds 8 decode rows and more rows are more
// n8 tiles beside it, each column computed by the same instructions on its own data.
//  - k is walked in steps of 64. Within a step, lane (g, t) of a warp (g = lane / 4, t = lane % 4) holds elements
//    16t .. 16t + 15 of its w rows g and g + 8 and of its x row g, and MMA q = 0..3 takes elements 16t + 4q + 0..3
//    into its k slots 2t, 2t + 1, 2t + 8, 2t + 9. Which element lands in which slot depends only on k.
//  - k's steps are cut into `slices` contiguous ranges, a function of the weight's shape (n, k) alone (plan_for). Each
//    slice is one block of
//    a thread block cluster; its warps accumulate the slice's steps in order in their MMA accumulators (starting
//    from zero), q = 0, 1, 2, 3 within a step.
//  - The slices' partial sums are added in slice order, (((p0 + p1) + p2) + ...), read through distributed shared
//    memory, and rounded once.
//  - x rows past m are zeros in their own columns only; k past its end (a partial last step) is zeros in every
//    column alike, whatever m is.
// An element's value is thus the same fixed chain of operations on the same operands whatever m is and wherever the
// row sits; this relies on the MMA computing each output element of its tile by the same arithmetic, whatever its
// column (the tests compare rows alone, among others, and in reverse order, bit for bit).
//
// Work split of the tensor-core kernel: a block of 8 warps owns 128 w rows (16 per warp) and one k slice for up to
// 64 x rows; w streams straight into registers with 16-byte loads (each warp reads whole 128-byte lines of its 16
// rows per step), one step ahead of its use, and each warp asks L2 for its rows a few steps further ahead. The x
// rows of a step are staged once per block in shared memory (cp.async, a ring of three steps) and read by all 8 warps,
// so x costs L2 at most half of w's bytes even at 64 rows. More than 64 rows take further launches of 64 that re-read
// w.
//
// One variant moves only when bytes arrive, never an operation: the kernel compiled for 3 blocks an SM (80 registers,
// x read two tiles at a time), which the plans of gate | up and attention q | k | v take (they then fit one wave at 64
// rows). Staging each warp's w through a ring in shared memory instead of registers was measured and dropped: 20-50%
// slower at every row count (docs/benchmarks.md, thirteenth round).
//
// CUDA cores (the fallback, k % 16 == 8):
//  - k is cut into 16-byte chunks of 8 elements. Lane l of a warp owns chunks l, l + 32, l + 64, ... and adds them
//    into one fp32 partial sum in increasing chunk order, the 8 products of a chunk in element order (one fma each).
//  - The 32 lane partials are summed in one fixed pairwise tree.
// A warp owns kCols adjacent output columns (w rows) and walks k in segments of kSegChunks chunks per lane. Per
// segment it loads its w chunks once and then runs every x row of the current row tile over them. The partial sums
// of all rows of the tile live in shared memory ([row][col][lane], one slot per lane). Up to kTileRows rows read w
// once; more rows take further tiles that re-read w.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_sync.h"
#include "backend/cuda/skinny_gemm_slices.h"
#include "backend/cuda/skinny_regs_choice.h"
#include "backend/cuda/wgmma.h"

namespace duet::backend::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kChunk = 8;  // BF16 per 16-byte chunk

void refuse(const char* what) { check_cuda(cudaErrorInvalidValue, what); }

// ============================================================== CUDA cores (k % 16 == 8)

namespace cuda_core {

constexpr int kWarps = 4;       // warps per block
constexpr int kCols = 2;        // output columns per warp
constexpr int kSegChunks = 4;   // 16-byte chunks per lane per segment (kSegChunks * kCols loads in flight per lane)
constexpr int kTileRows = 32;   // x rows per pass over w
constexpr int kLaneSlots = 33;  // 32 lane partials per (row, column), padded so the reduction reads are conflict-free

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

void launch(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, void* y, bool y_f32, cudaStream_t stream) {
  const int cols_per_block = kWarps * kCols;
  const unsigned grid = static_cast<unsigned>((static_cast<int64_t>(n) + cols_per_block - 1) / cols_per_block);
  // At most 4 * 32 * 2 * 33 * 4 = 33 KiB: under the 48 KiB that needs no opt-in.
  const size_t smem = sizeof(float) * kWarps * std::min(m, kTileRows) * kCols * kLaneSlots;
  if (y_f32) {
    skinny_gemm_kernel<true><<<grid, kWarps * 32, smem, stream>>>(x, m, w, n, k, y);
  } else {
    skinny_gemm_kernel<false><<<grid, kWarps * 32, smem, stream>>>(x, m, w, n, k, y);
  }
  check_launch("launch_skinny_gemm (CUDA cores)");
}

}  // namespace cuda_core

// ============================================================== tensor cores (k % 16 == 0)

namespace mma {

using skinny::kMaxSlices;      // k slices = blocks per cluster
using skinny::kStep;           // k per step: 2 chunks per lane per w row
using skinny::part_stride;     // of a block's partial sums
constexpr int kWarpRows = 16;  // w rows per warp: the MMA's M
// Warps per block (kWarps, a template parameter): 8 (128 w rows, skinny_gemm_slices.h's kBlockRows), 4 or 2. Each warp
// computes its 16 rows alone, so a block's size changes no operation: only how many blocks (and clusters) share the
// work. kMinBlocks counts an SM's blocks as 8-warp ones (its registers a thread: 128 at 2, 80 at 3).
static_assert(8 * kWarpRows == skinny::kBlockRows);
constexpr int kMaxTiles = 8;          // n8 tiles (8 x rows each) per launch: 64 x rows
constexpr int kMinStepsPerSlice = 4;  // fewer slices for short k, so each block has a pipeline to run
// Staged x row: 64 BF16 + 16 bytes of padding (144 bytes), so that a quarter warp's 16-byte reads (2 rows x 4 lanes
// 32 bytes apart) fall on 32 distinct banks.
constexpr int kXStride = kStep + 8;

// The default k slices of a weight (plan_for may choose others for a shape): a function of k alone. The slices fix each
// element's order of summation, so they must never depend on m.
int slices_for(int32_t k) {
  const int32_t steps = (k + kStep - 1) / kStep;
  return std::clamp<int32_t>(steps / kMinStepsPerSlice, 1, kMaxSlices);
}

// x steps staged in a ring of three: while the block multiplies step s, step s + 1 arrives in the next buffer, and the
// one after it was last read at step s - 1, which every warp finished before the barrier of step s: one barrier a step.
constexpr int kXStages = 3;

template <int kTiles, int kWarps>
constexpr size_t smem_bytes() {
  const size_t x_stage = kXStages * sizeof(bf16) * kTiles * 8 * kXStride;                // the x steps in flight
  const size_t partials = sizeof(float) * kTiles * 8 * part_stride(kWarps * kWarpRows);  // over the dead x buffers
  return x_stage > partials ? x_stage : partials;
}
static_assert(smem_bytes<kMaxTiles, 8>() <= 48 * 1024, "over the shared memory a block gets without opting in");

// Whole-slice x staging: a row's slice takes at most ceil(steps / slices) steps, + 16 bytes of padding per row (the
// same banks as kXStride: 144 bytes = 16 modulo 128).
__host__ __device__ constexpr int slice_stride(int64_t steps, int slices) {
  return static_cast<int>((steps + slices - 1) / slices) * kStep + 8;
}
// Shared memory a whole-slice block may take (2 blocks an SM, as the registers allow); more rows stage step by step.
constexpr size_t kWholeSliceBytes = 96 * 1024;
constexpr int kWholeSliceMaxTiles = 2;  // up to 16 rows

// This lane's w for one step: elements 16t .. 16t + 15 of its rows g ([0], [1]) and g + 8 ([2], [3]); rows past n
// and chunks past k are zeros.
__device__ __forceinline__ void load_w_step(const bf16* row_a, const bf16* row_b, int32_t k, int32_t first_k,
                                            uint4 (&v)[4]) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  v[0] = row_a != nullptr && first_k < k ? load_weight_chunk(row_a + first_k) : zero;
  v[1] = row_a != nullptr && first_k + kChunk < k ? load_weight_chunk(row_a + first_k + kChunk) : zero;
  v[2] = row_b != nullptr && first_k < k ? load_weight_chunk(row_b + first_k) : zero;
  v[3] = row_b != nullptr && first_k + kChunk < k ? load_weight_chunk(row_b + first_k + kChunk) : zero;
}

// Stages the block's x rows one step at a time into `stage` ([kTiles * 8][kXStride]): rows past `rows` and chunks
// past k are zeros, read from nowhere. Each thread's chunks (row, 16-byte chunk within the step) and their source
// rows are worked out once; a step only moves the source along k.
template <int kTiles, int kThreads>
struct XStepStager {
  static constexpr int kChunksPerRow = kStep / kChunk;
  static constexpr int kChunks = kTiles * 8 * kChunksPerRow;
  static constexpr int kPerThread = (kChunks + kThreads - 1) / kThreads;
  const bf16* source[kPerThread];  // x row r at this chunk's element of step 0; nullptr: a row past `rows`
  int offset[kPerThread];          // element within one stage; -1: no chunk for this thread
  int first_element[kPerThread];   // this chunk's element within a step

  __device__ __forceinline__ XStepStager(const bf16* __restrict__ x, int32_t rows, int32_t k) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = i * kThreads + static_cast<int>(threadIdx.x);
      const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
      offset[i] = c < kChunks ? r * kXStride + chunk * kChunk : -1;
      first_element[i] = chunk * kChunk;
      source[i] = c < kChunks && r < rows ? x + r * static_cast<int64_t>(k) + chunk * kChunk : nullptr;
    }
  }

  __device__ __forceinline__ void stage(const bf16* __restrict__ x, int32_t k, int64_t step, bf16* stage) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (offset[i] < 0) break;
      const int64_t at = step * kStep;
      const bool valid = source[i] != nullptr && at + first_element[i] < k;
      cp_async_16(stage + offset[i], valid ? source[i] + at : x, valid ? 16u : 0u);
    }
  }
};

// One step's MMAs: for each n8 tile j, the 4 MMAs q = 0..3 in order into acc[j] (see the top of the file for which
// elements each takes).
// One step's MMAs: for each n8 tile j, the 4 MMAs q = 0..3 in order into acc[j] (see the top of the file for which
// elements each takes). The tiles' MMAs of one q are issued back to back (independent accumulators), so that no MMA
// waits on the one just before it; each acc[j] still takes q = 0, 1, 2, 3 in order. `x` is x row 0 at this step's
// first element, rows `stride` apart; kMasked: rows from `rows` on are zeros without being read (they are not staged).
template <int kTiles, bool kMasked>
__device__ __forceinline__ void mma_step(const bf16* x, int stride, int rows, int g, int t, const uint4 (&wv)[4],
                                         float (&acc)[kTiles][4]) {
  const bf16* mine = x + g * stride + t * 16;  // x row g of tile 0, elements 16t ..
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // h = 0: q = 0, 1 (elements 16t + 0..7); h = 1: q = 2, 3 (16t + 8..15)
    uint4 xv[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      xv[j] = !kMasked || 8 * j + g < rows ? *reinterpret_cast<const uint4*>(mine + j * 8 * stride + h * kChunk)
                                           : make_uint4(0, 0, 0, 0);
    const uint4 &wa = wv[h], &wb = wv[2 + h];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mma_16x8x16(acc[j], wa.x, wb.x, wa.y, wb.y, xv[j].x, xv[j].y);  // q = 2h
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mma_16x8x16(acc[j], wa.z, wb.z, wa.w, wb.w, xv[j].z, xv[j].w);  // q = 2h + 1
  }
}

// The same MMAs, each acc[j] still taking q = 0, 1, 2, 3 in order, with x read two tiles at a time just before their
// MMAs: 8 registers of x live instead of 4 * kTiles, for the kernel compiled to fit 3 blocks an SM (80 registers).
template <int kTiles, bool kMasked>
__device__ __forceinline__ void mma_step_paired(const bf16* x, int stride, int rows, int g, int t, const uint4 (&wv)[4],
                                                float (&acc)[kTiles][4]) {
  const bf16* mine = x + g * stride + t * 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 &wa = wv[h], &wb = wv[2 + h];
#pragma unroll
    for (int j0 = 0; j0 < kTiles; j0 += 2) {
      constexpr int kPair = 2;
      uint4 xv[kPair];
#pragma unroll
      for (int i = 0; i < kPair; ++i) {
        const int j = j0 + i;
        xv[i] = j < kTiles && (!kMasked || 8 * j + g < rows)
                    ? *reinterpret_cast<const uint4*>(mine + j * 8 * stride + h * kChunk)
                    : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kPair; ++i)
        if (j0 + i < kTiles) mma_16x8x16(acc[j0 + i], wa.x, wb.x, wa.y, wb.y, xv[i].x, xv[i].y);  // q = 2h
#pragma unroll
      for (int i = 0; i < kPair; ++i)
        if (j0 + i < kTiles) mma_16x8x16(acc[j0 + i], wa.z, wb.z, wa.w, wb.w, xv[i].z, xv[i].w);  // q = 2h + 1
    }
  }
}

// The block's x rows [0, rows) for all of its slice's steps [first, last) into `slice` (rows `stride` apart, step
// s at element (s - first) * kStep); elements past k are zeros, read from nowhere.
template <int kThreads>
__device__ __forceinline__ void stage_x_slice(const bf16* __restrict__ x, int32_t rows, int32_t k, int64_t first,
                                              int64_t last, bf16* slice, int stride) {
  const int chunks_per_row = static_cast<int>(last - first) * (kStep / kChunk);
  for (int c = threadIdx.x; c < rows * chunks_per_row; c += kThreads) {
    const int r = c / chunks_per_row, chunk = c % chunks_per_row;
    const int64_t at = first * kStep + static_cast<int64_t>(chunk) * kChunk;
    const bool valid = at < k;
    cp_async_16(slice + r * stride + chunk * kChunk, valid ? x + r * static_cast<int64_t>(k) + at : x,
                valid ? 16u : 0u);
  }
}

// After the k loop: the block's accumulators to shared memory (over the dead x stages), then the cluster's slices added
// in slice order and stored (skinny_gemm_slices.h).
template <int kTiles, bool kOutF32, int kWarps>
__device__ __forceinline__ void finish_block(unsigned char* smem, const float (&acc)[kTiles][4],
                                             cg::cluster_group& cluster, int32_t rows, int64_t block_row0, int32_t n,
                                             const SkinnyOutputs& out) {
  cp_async_wait<0>();
  __syncthreads();  // the x stages are dead; the partials take their place
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  // acc[j] holds w rows warp_row0 + g (c0, c1) and + g + 8 (c2, c3) for x rows 8j + 2t (c0, c2) and 8j + 2t + 1.
  float* partials = reinterpret_cast<float*>(smem);
  const int local_row = warp * kWarpRows + g;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    constexpr int kStride = part_stride(kWarps * kWarpRows);
    float* p = partials + (8 * j + 2 * t) * kStride + local_row;
    p[0] = acc[j][0];
    p[kStride] = acc[j][1];
    p[8] = acc[j][2];
    p[kStride + 8] = acc[j][3];
  }
  skinny::add_slices_and_store<kOutF32, kWarps * kWarpRows>(cluster, partials, rows, block_row0, n, out);
}

// rows (<= kTiles * 8) x rows against w; grid: slices * ceil(n / (16 kWarps)) blocks in clusters of `slices`.
// kAhead: steps of w each lane has in flight in registers beyond the one it multiplies (the loop is unrolled by
// kAhead + 1 so that every buffer index is a constant and no register array spills); kPrefetch: steps ahead that each
// warp asks L2 for. kWholeSlice: the block's x rows for its whole k slice are staged once, before the loop (few rows:
// a small copy), so the loop runs without a block barrier and each warp streams its w at its own pace; otherwise one
// step of x at a time, in a ring of three, one barrier a step. None of them changes an operation or its order: only
// when bytes arrive.
template <int kTiles, bool kOutF32, int kAhead, int kPrefetch, bool kWholeSlice, int kMinBlocks, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks * 8 / kWarps)
    skinny_gemm_mma_kernel(const bf16* __restrict__ x, int32_t rows, const bf16* __restrict__ w, int32_t n, int32_t k,
                           const SkinnyOutputs out) {
  extern __shared__ __align__(16) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  constexpr int kThreads = kWarps * 32;
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x / slices) * (kWarps * kWarpRows);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;

  // This slice's steps: a function of (k, slice) only.
  const skinny::SliceSteps range(k, slice, slices);
  const int64_t steps = range.steps, first = range.first, last = range.last;

  const int64_t warp_row0 = skinny::warp_first_row(out, blockIdx.x / slices, warp, kWarps);
  const bf16* row_a = warp_row0 + g < n ? w + (warp_row0 + g) * k : nullptr;
  const bf16* row_b = warp_row0 + g + 8 < n ? w + (warp_row0 + g + 8) * k : nullptr;
  // Lanes 0..15 each keep one of the warp's 16 rows coming into L2 ahead of the loads: a step of a row is 128 bytes,
  // one line when rows start on a line (k % 64 == 0, every Qwen3.5 shape), else it may reach into a second line.
  const bf16* prefetch_row = lane < kWarpRows && warp_row0 + lane < n ? w + (warp_row0 + lane) * k : nullptr;
  const bool step_spans_two_lines = k % kStep != 0;
  auto prefetch_steps = [&](int64_t from, int64_t to) {  // steps [from, to) of this lane's row, clipped to k
    if (prefetch_row == nullptr) return;
    for (int64_t s = from; s < to; ++s) {
      prefetch_l2(prefetch_row + s * kStep);
      if (step_spans_two_lines) prefetch_l2(prefetch_row + min(s * kStep + kStep - 1, static_cast<int64_t>(k) - 1));
    }
  };

  bf16* const stages = reinterpret_cast<bf16*>(smem);  // kXStages x [kTiles * 8][kXStride]
  constexpr int kStageElems = kTiles * 8 * kXStride;
  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  constexpr int kBuffers = kAhead + 1;
  uint4 wbuf[kBuffers][4] = {};
  // Launched as a dependent (dependent_launch.h): the weights are read while the kernel before finishes; x, written by
  // it, only after wait_for_prerequisites. The outputs are written at the very end. The next kernel may be scheduled
  // once this one is past its wait (never earlier: a chain of waiting grids would hold the SMs).
  if (first < last) {
    prefetch_steps(first, min(first + kPrefetch, last));
#pragma unroll
    for (int b = 0; b < kAhead; ++b)
      if (first + b < last) load_w_step(row_a, row_b, k, static_cast<int32_t>((first + b) * kStep) + t * 16, wbuf[b]);
  }
  wait_for_prerequisites();
  let_dependents_launch();
  if constexpr (kWholeSlice) {
    const int stride = slice_stride(steps, slices);
    if (first < last) stage_x_slice<kThreads>(x, rows, k, first, last, stages, stride);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // the slice's x, staged by every thread, is in place; no other barrier until the loop ends
    for (int64_t s0 = first; s0 < last; s0 += kBuffers) {
#pragma unroll
      for (int b = 0; b < kBuffers; ++b) {
        const int64_t s = s0 + b;
        if (s >= last) break;
        if (s + kAhead < last)
          load_w_step(row_a, row_b, k, static_cast<int32_t>((s + kAhead) * kStep) + t * 16,
                      wbuf[(b + kAhead) % kBuffers]);
        if (s + kPrefetch < last) prefetch_steps(s + kPrefetch, s + kPrefetch + 1);
        if constexpr (kMinBlocks > 2) {
          mma_step_paired<kTiles, true>(stages + (s - first) * kStep, stride, rows, g, t, wbuf[b], acc);
        } else {
          mma_step<kTiles, true>(stages + (s - first) * kStep, stride, rows, g, t, wbuf[b], acc);
        }
      }
    }
  } else {
    const XStepStager<kTiles, kThreads> stager(x, rows, k);
    if (first < last) stager.stage(x, k, first, stages);
    cp_async_commit();
    int buffer = 0;  // this step's x: (s - first) % kXStages
    for (int64_t s0 = first; s0 < last; s0 += kBuffers) {
#pragma unroll
      for (int b = 0; b < kBuffers; ++b) {
        const int64_t s = s0 + b;
        if (s >= last) break;  // the same for the whole block
        const int next = buffer + 1 == kXStages ? 0 : buffer + 1;
        // Next step's x and a later step's w on their way before this step's wait; a step further on asked of L2.
        if (s + 1 < last) stager.stage(x, k, s + 1, stages + next * kStageElems);
        if (s + kAhead < last)
          load_w_step(row_a, row_b, k, static_cast<int32_t>((s + kAhead) * kStep) + t * 16,
                      wbuf[(b + kAhead) % kBuffers]);
        cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning "this step's x"
        if (s + kPrefetch < last) prefetch_steps(s + kPrefetch, s + kPrefetch + 1);
        cp_async_wait<1>();
        // This step's x, staged by every thread, is in place; and every warp is done with step s - 1's buffer,
        // which step s + 2 refills (kXStages).
        __syncthreads();
        if constexpr (kMinBlocks > 2) {
          mma_step_paired<kTiles, false>(stages + buffer * kStageElems, kXStride, rows, g, t, wbuf[b], acc);
        } else {
          mma_step<kTiles, false>(stages + buffer * kStageElems, kXStride, rows, g, t, wbuf[b], acc);
        }
        buffer = next;
      }
    }
  }
  finish_block<kTiles, kOutF32, kWarps>(smem, acc, cluster, rows, block_row0, n, out);
}

template <int kTiles, bool kOutF32, int kAhead, int kPrefetch, bool kWholeSlice, int kMinBlocks, int kWarps>
void launch_tiles(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                  int slices, cudaStream_t stream) {
  auto* kernel = skinny_gemm_mma_kernel<kTiles, kOutF32, kAhead, kPrefetch, kWholeSlice, kMinBlocks, kWarps>;
  size_t smem = smem_bytes<kTiles, kWarps>();
  if constexpr (kWholeSlice) {
    static const bool opted_in =  // once per instantiation
        (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kWholeSliceBytes)),
                    "launch_skinny_gemm: shared memory opt-in"),
         true);
    (void)opted_in;
    smem = std::max(smem, sizeof(bf16) * rows * slice_stride((k + kStep - 1) / kStep, slices));
  }
  skinny::launch_clusters(kernel, kWarps * 32, kWarps * kWarpRows, smem, n, slices, stream,
                          "launch_skinny_gemm (tensor cores)", x, rows, w, n, k, out);
}

// Whole-slice staging when the rows' slices fit (kWholeSliceBytes) and the pipeline does not ask for steps.
template <int kTiles, bool kOutF32, int kAhead, int kPrefetch, int kMinBlocks, int kWarps>
void launch_staged(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                   int slices, bool per_step, cudaStream_t stream) {
  if constexpr (kTiles <= kWholeSliceMaxTiles) {
    if (!per_step && sizeof(bf16) * rows * slice_stride((k + kStep - 1) / kStep, slices) <= kWholeSliceBytes)
      return launch_tiles<kTiles, kOutF32, kAhead, kPrefetch, true, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices,
                                                                                        stream);
  }
  launch_tiles<kTiles, kOutF32, kAhead, kPrefetch, false, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, stream);
}

template <bool kOutF32, int kAhead, int kPrefetch, int kMinBlocks = 2, int kWarps = 8>
void launch_rows(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out, int slices,
                 bool per_step, cudaStream_t stream) {
  // The narrowest tile count that holds the rows: fewer MMAs and x bytes, the same arithmetic per element.
  switch ((rows + 7) / 8) {
    case 1:
      return launch_staged<1, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 2:
      return launch_staged<2, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 3:
      return launch_staged<3, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 4:
      return launch_staged<4, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 5:
      return launch_staged<5, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 6:
      return launch_staged<6, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    case 7:
      return launch_staged<7, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
    default:
      return launch_staged<8, kOutF32, kAhead, kPrefetch, kMinBlocks, kWarps>(x, rows, w, n, k, out, slices, per_step,
                                                                              stream);
  }
}

// ---- The weights in registers, x by wgmma (SkinnyPipeline::wgmma_registers)
// The same work split, loads and order of summation as skinny_gemm_mma_kernel, but each step's MMAs are Hopper's
// warpgroup MMA with A in registers: wgmma m64nNk16 (N = 8 kTiles) takes each warp's 16 w rows in mma.sync's A
// layout, so the registers that load_w_step fills feed it as they feed mma.sync, and reads B (x) from shared memory
// itself: four asynchronous instructions a warpgroup a step instead of 4 kTiles mma.sync and 2 kTiles x fragment loads
// a warp. The bits are mma.sync's: MMA q of a step sums the same k16 group (elements 16t + 4q + 0..3, t = 0..3) with
// its products in the same k slots, and a tensor core's k16 group sum is the same for wgmma and mma.sync
// (tests/cuda/wgmma_probe.cu); x is staged so that B's slot 2t + i holds element 16t + 4q + i and slot 8 + 2t + i
// element 16t + 4q + 2 + i, as mma.sync's B fragment does.
//
// x in shared memory, a step of it: for each group of 8 x rows, 8 core matrices (8 rows x 16 bytes) u = 2q + half,
// core matrix u of row n holding the 4-byte pairs 8t + u (t = 0..3) of the row's step; 144 bytes apart (128 + 16), so
// that a warp's 32 pair copies of one row fall on 32 banks. wgmma q reads core matrices 2q and 2q + 1 (k slots 0..7,
// 8..15: the leading byte offset, 144) of every row group (the stride byte offset, 8 x 144).
constexpr int kRegsCoreBytes = 144;
constexpr int kRegsGroupBytes = 8 * kRegsCoreBytes;
// Four x steps in shared memory: step s + 1 is copied at step s into the buffer of step s - 3, whose MMAs every
// warpgroup waited for at step s - 2 (one group left in flight) before the barrier of step s - 1.
constexpr int kRegsXStages = 4;
// Steps of w in registers: s multiplied, s + 1 .. s + kAhead loaded, and at 2 blocks an SM s - 1's, whose MMAs may
// still be reading them (at 3, a step's MMAs are waited for before the step ends: one buffer fewer, 80 registers).
template <int kAhead, int kMinBlocks>
constexpr int regs_w_buffers() {
  return kMinBlocks == 3 ? kAhead + 1 : kAhead + 2;
}

template <int kTiles>
constexpr size_t regs_smem_bytes() {
  const size_t x_stages = static_cast<size_t>(kRegsXStages) * kTiles * kRegsGroupBytes;
  const size_t partials = sizeof(float) * kTiles * 8 * part_stride(8 * kWarpRows);  // over the dead x stages
  return x_stages > partials ? x_stages : partials;
}
static_assert(regs_smem_bytes<kMaxTiles>() <= 48 * 1024, "over the shared memory a block gets without opting in");

// Thread (warp w, lane l) copies pair l of x rows 8i + w (i < kTiles) of a step: 4-byte copies whose sources a warp
// reads as one 128-byte row; rows past `rows` and pairs past k are zeros, read from nowhere.
template <int kTiles>
__device__ __forceinline__ void stage_x_pairs(const bf16* __restrict__ x, int32_t rows, int32_t k, int64_t step,
                                              unsigned char* stage) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t = lane / 8, u = lane % 8;
  const int64_t element = step * kStep + 2 * lane;
  unsigned char* to = stage + u * kRegsCoreBytes + warp * 16 + 4 * t;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int row = 8 * i + warp;
    const bool valid = row < rows && element < k;
    cp_async_4(to + i * kRegsGroupBytes, valid ? x + static_cast<int64_t>(row) * k + element : x, valid ? 4u : 0u);
  }
}

// x through registers instead (kXRegs, an experiment): a step's x as 16-byte loads (chunk c of the step: row c / 8,
// elements 8 (c % 8) ..), one step ahead of their stores, each chunk's 4 pairs stored where stage_x_pairs puts them
// (a warp's stores of one pair index fall on 32 banks). 4 times fewer requests of L2 than the 4-byte copies.
template <int kTiles>
struct XPairRegisters {
  static constexpr int kChunks = (kTiles * 8 * kStep / kChunk + 255) / 256;  // a thread's 16-byte chunks a step
  uint4 v[kChunks];

  __device__ __forceinline__ void load(const bf16* __restrict__ x, int32_t rows, int32_t k, int64_t step) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * 256 + static_cast<int>(threadIdx.x);
      const int row = c / (kStep / kChunk);
      const int64_t element = step * kStep + (c % (kStep / kChunk)) * kChunk;
      const bool valid = c < kTiles * 8 * (kStep / kChunk) && row < rows && element < k;
      v[i] = valid ? __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(row) * k + element))
                   : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void store(unsigned char* stage) const {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * 256 + static_cast<int>(threadIdx.x);
      if (c >= kTiles * 8 * (kStep / kChunk)) break;
      const int row = c / (kStep / kChunk), chunk = c % (kStep / kChunk);
      // Pairs 4 chunk .. 4 chunk + 3: t = chunk / 2, u = 4 (chunk % 2) + j.
      unsigned char* to =
          stage + (row / 8) * kRegsGroupBytes + (4 * (chunk % 2)) * kRegsCoreBytes + (row % 8) * 16 + 4 * (chunk / 2);
      *reinterpret_cast<uint32_t*>(to) = v[i].x;
      *reinterpret_cast<uint32_t*>(to + kRegsCoreBytes) = v[i].y;
      *reinterpret_cast<uint32_t*>(to + 2 * kRegsCoreBytes) = v[i].z;
      *reinterpret_cast<uint32_t*>(to + 3 * kRegsCoreBytes) = v[i].w;
    }
  }
};

// kAhead: steps of w loaded ahead of the one multiplied (1 in the plans; 2 an experiment); kPrefetch: steps asked of L2
// ahead (4 in the plans); kXRegs: x through registers (above) rather than by 4-byte copies; kMinBlocks: 2 in the plans,
// 3 an experiment (the registers of 3 blocks an SM, as gate | up's mma.sync plan takes them). None moves an operation.
template <int kTiles, bool kOutF32, int kAhead, int kPrefetch, bool kXRegs, int kMinBlocks = 2>
__global__ void __launch_bounds__(256, kMinBlocks)
    skinny_gemm_regs_kernel(const bf16* __restrict__ x, int32_t rows, const bf16* __restrict__ w, int32_t n, int32_t k,
                            const SkinnyOutputs out) {
  constexpr int kWarps = 8, kBuffers = regs_w_buffers<kAhead, kMinBlocks>();
  extern __shared__ __align__(128) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x / slices) * (kWarps * kWarpRows);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const skinny::SliceSteps range(k, slice, slices);
  const int64_t first = range.first, last = range.last;

  const int64_t warp_row0 = block_row0 + warp * kWarpRows;
  const bf16* row_a = warp_row0 + g < n ? w + (warp_row0 + g) * k : nullptr;
  const bf16* row_b = warp_row0 + g + 8 < n ? w + (warp_row0 + g + 8) * k : nullptr;
  const bf16* prefetch_row = lane < kWarpRows && warp_row0 + lane < n ? w + (warp_row0 + lane) * k : nullptr;
  const bool step_spans_two_lines = k % kStep != 0;
  auto prefetch_steps = [&](int64_t from, int64_t to) {
    if (prefetch_row == nullptr) return;
    for (int64_t s = from; s < to; ++s) {
      prefetch_l2(prefetch_row + s * kStep);
      if (step_spans_two_lines) prefetch_l2(prefetch_row + min(s * kStep + kStep - 1, static_cast<int64_t>(k) - 1));
    }
  };
  constexpr size_t kStageBytes = static_cast<size_t>(kTiles) * kRegsGroupBytes;
  auto stage_of = [&](int64_t s) { return smem + static_cast<size_t>((s - first) % kRegsXStages) * kStageBytes; };

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  uint4 wbuf[kBuffers][4] = {};
  // As skinny_gemm_mma_kernel: the weights before the wait for the kernel before, x after it.
  if (first < last) {
    prefetch_steps(first, min(first + kPrefetch, last));
#pragma unroll
    for (int b = 0; b < kAhead; ++b)
      if (first + b < last) load_w_step(row_a, row_b, k, static_cast<int32_t>((first + b) * kStep) + t * 16, wbuf[b]);
  }
  wait_for_prerequisites();
  let_dependents_launch();
  [[maybe_unused]] XPairRegisters<kTiles> xr;  // kXRegs: step s + 1's x, loaded at step s - 1
  if constexpr (kXRegs) {
    if (first < last) {
      xr.load(x, rows, k, first);
      xr.store(stage_of(first));
    }
    if (first + 1 < last) xr.load(x, rows, k, first + 1);
  } else {
    if (first < last) stage_x_pairs<kTiles>(x, rows, k, first, stage_of(first));
    cp_async_commit();
  }
  for (int64_t s0 = first; s0 < last; s0 += kBuffers) {
#pragma unroll
    for (int b = 0; b < kBuffers; ++b) {
      const int64_t s = s0 + b;
      if (s >= last) break;  // the same for the whole block
      if constexpr (kXRegs) {
        if (s + 1 < last) xr.store(stage_of(s + 1));  // the buffer of step s - 3 (see kRegsXStages)
        if (s + 2 < last) xr.load(x, rows, k, s + 2);
      } else {
        if (s + 1 < last) stage_x_pairs<kTiles>(x, rows, k, s + 1, stage_of(s + 1));
      }
      // Step s + kAhead's w into the registers of step s - 2 (at 3 blocks an SM, s - 1), whose MMAs this thread waited
      // for at the end of step s - 1.
      if (s + kAhead < last)
        load_w_step(row_a, row_b, k, static_cast<int32_t>((s + kAhead) * kStep) + t * 16,
                    wbuf[(b + kAhead) % kBuffers]);
      if (s + kPrefetch < last) prefetch_steps(s + kPrefetch, s + kPrefetch + 1);
      if constexpr (!kXRegs) {
        cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning "this step's x"
        cp_async_wait<1>();
      }
      fence_shared_for_async_proxy();
      __syncthreads();  // step s's x, copied or stored by every thread, is in place for the tensor cores
      const uint4(&v)[4] = wbuf[b];
      const unsigned char* x_step = stage_of(s);
      wgmma_fence();
      // MMA q = 0..3 in order onto the same accumulators (load_w_step: v[0], v[1] row g, elements 16t + 0..7 and
      // 8..15; v[2], v[3] row g + 8), each reading core matrices 2q and 2q + 1 of every row group.
      wgmma_bf16_a_registers<kTiles>(acc, v[0].x, v[2].x, v[0].y, v[2].y,
                                     wgmma_descriptor(x_step, kRegsCoreBytes, kRegsGroupBytes));
      wgmma_bf16_a_registers<kTiles>(acc, v[0].z, v[2].z, v[0].w, v[2].w,
                                     wgmma_descriptor(x_step + 2 * kRegsCoreBytes, kRegsCoreBytes, kRegsGroupBytes));
      wgmma_bf16_a_registers<kTiles>(acc, v[1].x, v[3].x, v[1].y, v[3].y,
                                     wgmma_descriptor(x_step + 4 * kRegsCoreBytes, kRegsCoreBytes, kRegsGroupBytes));
      wgmma_bf16_a_registers<kTiles>(acc, v[1].z, v[3].z, v[1].w, v[3].w,
                                     wgmma_descriptor(x_step + 6 * kRegsCoreBytes, kRegsCoreBytes, kRegsGroupBytes));
      wgmma_commit();
      // Step s - 1's MMAs are done (at 3 blocks an SM, step s's): their w registers and (after the next barrier) their
      // x buffer free.
      if constexpr (kMinBlocks == 3) {
        wgmma_wait<0>();
      } else {
        wgmma_wait<1>();
      }
    }
  }
  wgmma_wait<0>();
  fence_accumulators(acc);
  finish_block<kTiles, kOutF32, kWarps>(smem, acc, cluster, rows, block_row0, n, out);
}

template <bool kOutF32, int kAhead, int kPrefetch, bool kXRegs, int kMinBlocks = 2>
void launch_regs_pipeline(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                          int slices, cudaStream_t stream) {
  auto launch = [&](auto kernel, size_t smem) {
    skinny::launch_clusters(kernel, 256, 8 * kWarpRows, smem, n, slices, stream,
                            "launch_skinny_gemm (wgmma, w in registers)", x, rows, w, n, k, out);
  };
  // The narrowest N that holds the rows (8, 16, 32 or 64): the same bits per element whatever N is.
  if (rows <= 8)
    return launch(skinny_gemm_regs_kernel<1, kOutF32, kAhead, kPrefetch, kXRegs, kMinBlocks>, regs_smem_bytes<1>());
  if (rows <= 16)
    return launch(skinny_gemm_regs_kernel<2, kOutF32, kAhead, kPrefetch, kXRegs, kMinBlocks>, regs_smem_bytes<2>());
  if (rows <= 32)
    return launch(skinny_gemm_regs_kernel<4, kOutF32, kAhead, kPrefetch, kXRegs, kMinBlocks>, regs_smem_bytes<4>());
  launch(skinny_gemm_regs_kernel<8, kOutF32, kAhead, kPrefetch, kXRegs, kMinBlocks>, regs_smem_bytes<8>());
}

// The plans' pipeline (one step ahead, L2 4 ahead, x by 4-byte copies) in both output types; the bench's experiments
// (two steps ahead, L2 8 ahead, x through registers; BF16 out) only in builds with DUET_SKINNY_EXPERIMENTS (the
// benchmarks' builds, not CI's: their kernels cost compile time and no plan takes them).
void launch_regs(const SkinnyPipeline& p, const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k,
                 const SkinnyOutputs& out, bool y_f32, int slices, cudaStream_t stream) {
  if (p.ahead == 1 && p.prefetch == 4 && !p.x_through_registers && p.min_blocks != 3) {
    if (y_f32) return launch_regs_pipeline<true, 1, 4, false>(x, rows, w, n, k, out, slices, stream);
    return launch_regs_pipeline<false, 1, 4, false>(x, rows, w, n, k, out, slices, stream);
  }
#ifdef DUET_SKINNY_EXPERIMENTS
  if (!y_f32) {
    if (p.ahead == 2 && p.prefetch == 4 && !p.x_through_registers)
      return launch_regs_pipeline<false, 2, 4, false>(x, rows, w, n, k, out, slices, stream);
    if (p.ahead == 1 && p.prefetch == 8 && !p.x_through_registers)
      return launch_regs_pipeline<false, 1, 8, false>(x, rows, w, n, k, out, slices, stream);
    if (p.ahead == 1 && p.prefetch == 4 && p.x_through_registers)
      return launch_regs_pipeline<false, 1, 4, true>(x, rows, w, n, k, out, slices, stream);
    if (p.ahead == 2 && p.prefetch == 4 && p.x_through_registers)
      return launch_regs_pipeline<false, 2, 4, true>(x, rows, w, n, k, out, slices, stream);
    if (p.ahead == 1 && p.prefetch == 4 && !p.x_through_registers && p.min_blocks == 3)
      return launch_regs_pipeline<false, 1, 4, false, 3>(x, rows, w, n, k, out, slices, stream);
  }
#endif
  refuse("launch_skinny_gemm: a wgmma pipeline that is not built (the experiments need DUET_SKINNY_EXPERIMENTS)");
}

// How a weight of shape [n, k] is read: its k slices (which fix every output's order of summation, so they depend on
// the shape alone, never on m) and the pipeline (which only moves when bytes arrive). Measured on the H200 with
// tests/cuda/skinny_gemm_bench.cu (docs/benchmarks.md): about 2 blocks per SM in flight is what matters, so wide
// weights take fewer slices; the Qwen3.5-9B's fused projections have their own measured rows.
SkinnyPipeline mma_plan_for(int32_t n, int32_t k) {
  // Up to 16 rows, x's whole slice is staged at once unless the plan says per_step_x (the 4th field): the bench at
  // 1 and 8 rows (receipts 2026-12-02) gave GDN qkv 3,151 / 2,945 GB/s against 2,880 / 2,804 step by step, out_proj
  // and o_proj 2,428 against 2,373, but gate | up 3,722 against 3,786 and down 3,064 against 3,122: each shape takes
  // its better one (no bit changes either way).
  // Compiled for 3 blocks an SM (80 registers, x read two tiles at a time): the same bits, more warps to hide the
  // loads' latency and one wave instead of 1.45 for the 384 blocks of gate | up at 64 rows (receipts 2026-12-03, round
  // 13): gate | up 2,217 GB/s against 1,944 at 64 rows, attention q | k | v 1,818 against 1,512, both the same at 1
  // row; the others lose with it (out_proj 1,148 against 1,582, down 1,433 against 2,088: their 224 blocks already
  // fit).
  const auto three_blocks = [](SkinnyPipeline p) {
    p.min_blocks = 3;
    return p;
  };
  if (k == 4096 && n == 24576) return three_blocks({1, 4, 2, true});  // MLP gate | up: 3,786 GB/s at 1 row
  if (k == 4096 && n == 12352) return {1, 4, 2};  // GDN qkv | z | b | a: 3,151 (4 slices 2,569; 8: 2,647)
  if (k == 4096 && n > 4096 && n <= 10240) return three_blocks({1, 4, 4});  // attention q | k | v: 3,323 at 1 row
  // The [4096, k] weights are 32 row blocks; 8 slices make 32 clusters of 8, of which at most 30 run at once (ncu's
  // max active clusters), so the last two ran in a second wave. 7 slices fit in one:
  if (n == 4096 && k == 12288) return {2, 8, 7, true};  // MLP down: 3,122 at 1 row, 1,931 at 64 (8 slices: 2,300)
  if (n == 4096 && k == 4096) return {1, 4, 7};         // out_proj, o_proj: 2,428 / 1,462 (8 slices: 2,535 / 1,070)
  if (n >= 65536) return {1, 4, 2};  // the LM head [248320, 4096]: 3,900 (8 slices 3,382), 88% of the read rate
  return {1, 4, slices_for(k)};
}

// Blocks an SM for the measurements: DUET_SKINNY_MIN_BLOCKS=2 or 3 overrides the plans (3 only where they take one step
// ahead and prefetch 4); unset, each shape takes its plan's (0).
int min_blocks_choice() {
  static const int choice = [] {
    const char* text = std::getenv("DUET_SKINNY_MIN_BLOCKS");
    const int value = text != nullptr ? std::atoi(text) : 0;
    return value == 2 || value == 3 ? value : 0;
  }();
  return choice;
}

// Where a shape reads faster another way at some row counts (bench_skinny_gemm --tiles, which times every variant that
// keeps the shape's slices at every tile count): the pipeline, staging and blocks an SM for launches of up to
// `max_rows` rows. The slices stay the shape's, so every bit stays (only when bytes arrive and how many blocks run at
// once move).
struct RowsPlan {
  int32_t n, k, min_rows, max_rows;
  int ahead, prefetch;
  bool per_step_x;
  int min_blocks;
  int block_warps = 8;
};
// bench_skinny_gemm --tiles on the H200 (docs/benchmarks.md, fourteenth round), GB/s of weights read, the shape's plan
// against the entry: GDN qkv | z | b | a 2,487 -> 2,842 at 16 rows, 2,435 -> 2,646 at 24, 2,308 -> 2,390 at 32 (3
// blocks an SM; 2 blocks win from 40 rows on); attention q | k | v 2,837 -> 2,956 at 16 (x step by step); MLP down
// 2,716 -> 2,975 at 16, 2,529 -> 2,696 at 32, 2,092 -> 2,189 at 64 (one step ahead instead of two; 2,877 -> 3,019 at 8
// with two ahead and x whole); the LM head 3,555 -> 3,710 at 16, 3,370 -> 3,591 at 24, 3,143 -> 3,337 at 32 (3 blocks).
// Blocks of 2 warps, x step by step (bench_skinny_gemm --blocks, twenty-third round): out_proj and o_proj 2,410 ->
// 2,799 GB/s at 1 row and 2,255 -> 2,456 at 8 (8 warps from 12 rows on); MLP down 3,197 -> 3,434 at 1 row and 3,069 ->
// 3,184 at 4 (at 8 rows 2,898 against 2,969: 8 warps). GDN qkv | z | b | a in 4-warp blocks read 3,377-3,406 GB/s at 1
// row against its plan's 3,298 in two calls and 3,010 against 3,230 in a third: kept as it was.
// The first entry that holds a launch's rows is taken. Shapes and row counts where no variant won by more than the
// run's noise (about 2%) keep their plan.
constexpr RowsPlan kRowsPlans[] = {
    {4096, 4096, 1, 8, 1, 4, true, 2, 2},  {4096, 12288, 1, 4, 1, 4, true, 2, 2}, {12352, 4096, 1, 8, 1, 4, false, 3},
    {12352, 4096, 9, 16, 1, 4, true, 3},   {12352, 4096, 17, 32, 1, 4, false, 3}, {10240, 4096, 9, 16, 1, 4, true, 3},
    {4096, 12288, 1, 8, 2, 8, false, 2},   {4096, 12288, 9, 64, 1, 4, false, 2},  {248320, 4096, 1, 8, 1, 4, true, 3},
    {248320, 4096, 9, 32, 1, 4, false, 3},
};

SkinnyPipeline with_rows(SkinnyPipeline p, int32_t n, int32_t k, int32_t rows, bool small_blocks = true) {
  for (const RowsPlan& r : kRowsPlans) {
    if (r.n != n || r.k != k || rows < r.min_rows || rows > r.max_rows) continue;
    if (!small_blocks && r.block_warps != 8) continue;
    p.ahead = r.ahead;
    p.prefetch = r.prefetch;
    p.per_step_x = r.per_step_x;
    p.min_blocks = r.min_blocks;
    p.block_warps = r.block_warps;
    break;
  }
  return p;
}

// DUET_SKINNY_EIGHT_WARPS=1: every launch in blocks of 8 warps (the plans before the twenty-third round), for
// before / after figures on one binary; the bits are the same either way.
bool eight_warps_only() {
  static const bool only = [] {
    const char* text = std::getenv("DUET_SKINNY_EIGHT_WARPS");
    return text != nullptr && std::string_view(text) == "1";
  }();
  return only;
}

SkinnyPipeline plan_for(int32_t n, int32_t k, int32_t rows) {
  SkinnyPipeline p = with_rows(mma_plan_for(n, k), n, k, rows);
  if (eight_warps_only() && p.block_warps != 8) p = with_rows(mma_plan_for(n, k), n, k, rows, /*small_blocks=*/false);
  if (min_blocks_choice() == 2) p.min_blocks = 2;
  if (min_blocks_choice() == 3 && p.ahead == 1 && p.prefetch == 4 && p.block_warps == 8) p.min_blocks = 3;
  // After the switches above, which rebuild p: the wgmma kernel in its own pipeline (one step ahead, L2 4 ahead, x by
  // 4-byte copies, 2 blocks an SM).
  if (skinny_regs_for(n, k, rows)) {
    p.wgmma_registers = true;
    p.ahead = 1;
    p.prefetch = 4;
    p.x_through_registers = false;
    p.min_blocks = 2;
  }
  return p;
}

SkinnyPipeline with_block_warps(SkinnyPipeline p, int warps) {
  p.block_warps = warps;
  return p;
}

// Blocks of 4 or 2 warps (64 or 32 w rows): BF16 out, one step of w ahead, L2 asked 4 steps ahead, up to 16 rows.
// At one row they read the [4096, k] weights 8-16% faster than 8-warp blocks (more clusters, each a short k slice:
// more loads in flight across the SMs), and lose from 16 rows on (docs/benchmarks.md, twenty-third round).
constexpr int kSmallBlockMaxRows = 16;
template <int kWarps>
void launch_small_blocks(const SkinnyPipeline& p, const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k,
                         const SkinnyOutputs& out, int slices, cudaStream_t stream) {
  if (p.min_blocks != 2 || p.ahead != 1 || p.prefetch != 4 || rows > kSmallBlockMaxRows)
    refuse("launch_skinny_gemm: blocks of 4 or 2 warps take ahead 1, prefetch 4, 2 blocks an SM, up to 16 rows");
  if (rows <= 8) return launch_staged<1, false, 1, 4, 2, kWarps>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
  launch_staged<2, false, 1, 4, 2, kWarps>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
}

template <bool kOutF32>
void launch_pipeline(const SkinnyPipeline& p, const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k,
                     const SkinnyOutputs& out, int slices, cudaStream_t stream) {
  if (p.block_warps != 8) {
    if constexpr (kOutF32) {  // built for BF16 out only; 8-warp blocks give the same bits
      return launch_pipeline<true>(with_block_warps(p, 8), x, rows, w, n, k, out, slices, stream);
    } else {
      if (p.block_warps == 4) return launch_small_blocks<4>(p, x, rows, w, n, k, out, slices, stream);
      if (p.block_warps == 2) return launch_small_blocks<2>(p, x, rows, w, n, k, out, slices, stream);
      refuse("launch_skinny_gemm: blocks of 8, 4 or 2 warps");
    }
  }
  if (p.min_blocks == 3) {  // 80 registers, a third block an SM: with one step of w ahead only
    if (p.ahead == 1 && p.prefetch == 4)
      return launch_rows<kOutF32, 1, 4, 3>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
    refuse("launch_skinny_gemm: 3 blocks an SM need ahead 1, prefetch 4");
  }
  if (p.ahead == 1 && p.prefetch == 4)
    return launch_rows<kOutF32, 1, 4>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
  if (p.ahead == 2 && p.prefetch == 8)
    return launch_rows<kOutF32, 2, 8>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
  if constexpr (!kOutF32) {  // the bench's other variants, BF16 out only
    if (p.ahead == 2 && p.prefetch == 4)
      return launch_rows<false, 2, 4>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
    if (p.ahead == 1 && p.prefetch == 8)
      return launch_rows<false, 1, 8>(x, rows, w, n, k, out, slices, p.per_step_x, stream);
  }
  refuse("launch_skinny_gemm: a pipeline that is not built");
}

// Runs x's rows in launches of up to 64, each with pipeline_for(rows) (production: the plan for that many rows; the
// bench: one fixed variant).
template <typename PipelineFor>
void launch(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& outputs, bool y_f32,
            PipelineFor&& pipeline_for, cudaStream_t stream) {
  for (int32_t r0 = 0; r0 < m; r0 += kMaxTiles * 8) {
    const int32_t rows = std::min<int32_t>(kMaxTiles * 8, m - r0);
    const SkinnyPipeline pipeline = pipeline_for(rows);
    const int slices = std::clamp(pipeline.max_slices, 1, kMaxSlices);
    const bf16* xr = x + static_cast<int64_t>(r0) * k;
    const SkinnyOutputs out = skinny::outputs_from_row(outputs, r0, y_f32);
    // The wgmma kernel keeps its rows one after another (ptxas serialized its MMAs when it also took the SwiGLU row
    // mapping, C7515): SwiGLU in the epilogue runs on the mma.sync kernel, the same bits.
    if (pipeline.wgmma_registers && out.swiglu_half == 0) {
      launch_regs(pipeline, xr, rows, w, n, k, out, y_f32, slices, stream);
      continue;
    }
    if (y_f32) {
      launch_pipeline<true>(pipeline, xr, rows, w, n, k, out, slices, stream);
    } else {
      launch_pipeline<false>(pipeline, xr, rows, w, n, k, out, slices, stream);
    }
  }
}

}  // namespace mma

}  // namespace

namespace {

void check_operands(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k) {
  if (m < 0 || n < 0) refuse("launch_skinny_gemm: negative m or n");
  if (k <= 0 || k % kChunk != 0) refuse("launch_skinny_gemm: k must be a positive multiple of 8");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0)
    refuse("launch_skinny_gemm: x and w must be 16-byte aligned");
}

}  // namespace

void launch_skinny_gemm(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, void* y, bool y_f32,
                        cudaStream_t stream) {
  SkinnyOutputs out;
  out.segments = 1;
  out.y[0] = y;
  out.first[1] = n;
  launch_skinny_gemm_segments(x, m, w, n, k, out, y_f32, stream);
}

void launch_skinny_gemm_segments(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k,
                                 const SkinnyOutputs& out, bool y_f32, cudaStream_t stream) {
  check_operands(x, m, w, n, k);
  if (out.segments < 1 || out.segments > SkinnyOutputs::kMaxSegments || out.first[0] != 0 ||
      out.first[out.segments] != n)
    refuse("launch_skinny_gemm: output segments must cover the columns 0 .. n");
  if (m == 0 || n == 0) return;
  // By the shape alone, so that a weight always takes the same engine and order of summation whatever m is: the TMA
  // engine for the weights skinny_tma_for names (its own bits), else the register-fed kernels (one set of bits).
  if (k % 16 == 0 && skinny_tma_for(n, k)) {
    launch_skinny_gemm_tma(x, m, w, n, k, out, y_f32, stream);
  } else if (k % 16 == 0) {
    mma::launch(
        x, m, w, n, k, out, y_f32, [&](int32_t rows) { return mma::plan_for(n, k, rows); }, stream);
  } else {
    if (out.segments != 1) refuse("launch_skinny_gemm: output segments need k % 16 == 0");
    cuda_core::launch(x, m, w, n, k, out.y[0], y_f32, stream);
  }
}

SkinnyPipeline skinny_plan_for(int32_t n, int32_t k, int32_t rows) { return mma::plan_for(n, k, rows); }

void launch_skinny_gemm_swiglu(const bf16* x, int32_t m, const bf16* w, int32_t half, int32_t k, bf16* y,
                               cudaStream_t stream, const SkinnyPipeline* pipeline) {
  check_operands(x, m, w, 2 * half, k);
  if (half <= 0 || half % 64 != 0 || k % 16 != 0)
    refuse("launch_skinny_gemm_swiglu: half a positive multiple of 64 and k of 16 (tensor cores, 8-warp blocks)");
  SkinnyOutputs out;
  out.segments = 1;
  out.y[0] = y;
  out.first[1] = 2 * half;
  out.swiglu_half = half;
  if (m == 0) return;
  if (skinny_tma_for(2 * half, k) && pipeline == nullptr)
    return launch_skinny_gemm_tma(x, m, w, 2 * half, k, out, false, stream);
  // The plan of the whole [2 half, k] weight, in 8-warp blocks (64 gate rows beside their 64 up rows).
  auto eight_warps = [](SkinnyPipeline p) {
    p.block_warps = 8;
    return p;
  };
  mma::launch(
      x, m, w, 2 * half, k, out, false,
      [&](int32_t rows) { return eight_warps(pipeline != nullptr ? *pipeline : mma::plan_for(2 * half, k, rows)); },
      stream);
}

void launch_skinny_gemm_pipeline(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, bf16* y,
                                 const SkinnyPipeline& pipeline, cudaStream_t stream) {
  check_operands(x, m, w, n, k);
  if (k % 16 != 0) refuse("launch_skinny_gemm_pipeline: tensor-core shapes only (k % 16 == 0)");
  SkinnyOutputs out;
  out.segments = 1;
  out.y[0] = y;
  out.first[1] = n;
  if (m > 0 && n > 0)
    mma::launch(
        x, m, w, n, k, out, false, [&](int32_t) { return pipeline; }, stream);
}

}  // namespace duet::backend::cuda
