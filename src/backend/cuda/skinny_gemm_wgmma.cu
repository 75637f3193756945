// The decode GEMM's warpgroup engine: y[m, n] = sum_k x[m, k] * w[n, k] for up to 64 rows a launch, BF16 in, fp32
// accumulation, by Hopper's wgmma with both operands in shared memory (wgmma.h). The mma.sync engine
// (skinny_gemm.cu) streams w into registers and has every warp read all x rows from shared memory at every step: at
// 64 rows it issued about 450 instructions a warp per 64-wide k step and read the weights at 35-55% of the device's
// rate (docs/benchmarks.md, tenth round). Here the tensor cores read both tiles from shared memory themselves, and a
// step costs a thread at most twelve 8-byte copies and, per warpgroup, four MMA instructions.
//
// Work split (the same as the mma.sync engine's, skinny_gemm_slices.h): a block of two warpgroups owns 128 w rows
// and one k slice; the slices of a row block are a cluster, added in slice order. Swapped operands: w's 64 rows of a
// warpgroup are the MMA's A (M = 64), the x rows its B (N = 8, 16, 32 or 64: the narrowest that holds the rows).
//
// Batch invariance and the mma.sync engine's bits: an output element is the chain, from zero, of one MMA per 16
// elements of k over its slice's steps in order, then the slices added in order. The k16 groups are the mma.sync
// engine's (skinny_gemm.cu: MMA q of a step takes elements 16t + 4q + 0..3 for t = 0..3), so this engine gives every
// element the bits that engine gives it: measured (tests/cuda/wgmma_probe.cu) that wgmma and mma.sync compute a k16
// group's sum alike, whatever the order of its 16 products and whatever N is. A shape may therefore take either
// engine for any m (skinny_gemm.cu: the warpgroup engine where the rows are many); the bench and the GPU tests check
// the bits across the switch. x rows past m and k past its end are zeros.
//
// Pipeline: kStages (4 or 6) steps of w and x in a ring of shared-memory buffers, filled by cp.async kStages - 1 steps
// ahead of the MMAs, the weights asked of L2 `prefetch` steps ahead; one block barrier a step (the buffer refilled at
// step s is the one step s - 1 read, and every warpgroup waits for its MMAs before the next barrier). The weights of
// the first steps are requested before the kernel waits for the one before it (dependent launch); x only after.
#include "backend/cuda/skinny_gemm_wgmma.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/mma_sync.h"
#include "backend/cuda/skinny_gemm_slices.h"
#include "backend/cuda/wgmma.h"

namespace duet::backend::cuda::skinny {

namespace {

constexpr int kThreads = 256;                  // two warpgroups
constexpr int kPiece = 4;                      // BF16 per 8-byte copy
constexpr int kPiecesPerRow = kStep / kPiece;  // 16
// A tile of R rows x one step in shared memory: [R / 8 row groups][8 chunks][8 rows][8 BF16], core matrices of 8 rows
// x 16 bytes; wgmma's k16 step q reads chunks 2q (k slots 0..7) and 2q + 1 (slots 8..15) of every row group. Piece p
// of a row (elements 4p .. 4p + 3; t = p / 4, q = p % 4) is the mma.sync engine's MMA q, so it goes to chunk
// 2q + t / 2, bytes (t % 2) * 8 of the row's 16.
constexpr uint32_t kChunkBytes = 128;                           // one core matrix: 8 rows x 16 bytes
constexpr uint32_t kGroupBytes = 8 * kChunkBytes;               // a row group's whole step
constexpr uint32_t kWTileBytes = kBlockRows / 8 * kGroupBytes;  // 16 KiB

template <int kN>
constexpr size_t stage_bytes() {
  return kWTileBytes + kN / 8 * kGroupBytes;
}
template <int kN, int kStages>
constexpr size_t smem_bytes() {
  return std::max(kStages * stage_bytes<kN>(), sizeof(float) * kN * kPartStride);
}

// Copy i of a tile: row i % 8 of row group i / 128, piece (i / 8) % 16: a warp's 32 copies read 32 contiguous bytes
// of each of 8 rows.
__device__ __forceinline__ int copy_row(int i) { return i / (8 * kPiecesPerRow) * 8 + i % 8; }
__device__ __forceinline__ int copy_piece(int i) { return (i / 8) % kPiecesPerRow; }
__device__ __forceinline__ uint32_t copy_offset(int i) {
  const int p = copy_piece(i), t = p / 4, q = p % 4;
  return static_cast<uint32_t>(i / (8 * kPiecesPerRow)) * kGroupBytes +
         static_cast<uint32_t>(2 * q + t / 2) * kChunkBytes + static_cast<uint32_t>(i % 8) * 16 +
         static_cast<uint32_t>(t % 2) * 8;
}

// This thread's copies of one tile, worked out once: the source at step 0 (nullptr: a row past the operand's rows,
// written as zeros) and the byte offset in the tile.
template <int kCopies>
struct TileCopies {
  const bf16* source[kCopies];
  uint32_t offset[kCopies];
  int element[kCopies];

  __device__ __forceinline__ TileCopies(const bf16* base, int64_t first_row, int64_t rows, int32_t k, int tile_copies) {
#pragma unroll
    for (int c = 0; c < kCopies; ++c) {
      const int i = c * kThreads + static_cast<int>(threadIdx.x);
      const int64_t row = first_row + copy_row(i);
      offset[c] = i < tile_copies ? copy_offset(i) : 0xffffffffu;
      element[c] = copy_piece(i) * kPiece;
      source[c] = i < tile_copies && row < rows ? base + row * k + element[c] : nullptr;
    }
  }

  // Step `step` of the tile into `tile`; elements past k are zeros, read from nowhere (`fallback`: any valid address).
  __device__ __forceinline__ void copy(int64_t step, int32_t k, const bf16* fallback, unsigned char* tile) const {
#pragma unroll
    for (int c = 0; c < kCopies; ++c) {
      if (offset[c] == 0xffffffffu) break;
      const int64_t at = step * kStep;
      const bool valid = source[c] != nullptr && at + element[c] < k;
      cp_async_8(tile + offset[c], valid ? source[c] + at : fallback, valid ? 8u : 0u);
    }
  }
};

template <int kN, int kStages, bool kOutF32>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_wgmma_kernel(const bf16* __restrict__ x, int32_t rows, const bf16* __restrict__ w, int32_t n, int32_t k,
                        const SkinnyOutputs out, int prefetch) {
  extern __shared__ __align__(128) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x / slices) * kBlockRows;
  const SliceSteps range(k, slice, slices);
  const int64_t count = range.last - range.first;

  constexpr int kWCopies = kBlockRows * kPiecesPerRow / kThreads;           // 8
  constexpr int kXCopies = (kN * kPiecesPerRow + kThreads - 1) / kThreads;  // 1 .. 4
  const TileCopies<kWCopies> w_copies(w, block_row0, n, k, kBlockRows * kPiecesPerRow);
  auto stage_at = [&](int64_t i) { return smem + (i % kStages) * stage_bytes<kN>(); };
  // Threads 0 .. 127 each keep one w row coming into L2 `prefetch` steps ahead: a step of a row is 128 bytes, one line
  // when rows start on a line (k % 64 == 0, every Qwen3.5 shape), else it may reach into a second.
  const int64_t prefetch_row_index = block_row0 + static_cast<int>(threadIdx.x);
  const bf16* prefetch_row =
      prefetch > 0 && threadIdx.x < kBlockRows && prefetch_row_index < n ? w + prefetch_row_index * k : nullptr;
  auto prefetch_step = [&](int64_t s) {
    if (prefetch_row == nullptr || s >= range.last) return;
    prefetch_l2(prefetch_row + s * kStep);
    if (k % kStep != 0) prefetch_l2(prefetch_row + min(s * kStep + kStep - 1, static_cast<int64_t>(k) - 1));
  };

  // The first kStages - 1 steps: weights before the wait for the kernel before (they do not depend on it), x after.
  for (int64_t s = range.first + kStages - 1; s < range.first + prefetch; ++s) prefetch_step(s);
  for (int i = 0; i < kStages - 1; ++i)
    if (i < count) w_copies.copy(range.first + i, k, w, stage_at(i));
  wait_for_prerequisites();
  let_dependents_launch();
  const TileCopies<kXCopies> x_copies(x, 0, rows, k, kN * kPiecesPerRow);
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < count) x_copies.copy(range.first + i, k, x, stage_at(i) + kWTileBytes);
    cp_async_commit();  // group i: step i's x (and, in group 0, the weights of every prologue step)
  }

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  float d[kN / 2];
#pragma unroll
  for (int j = 0; j < kN / 2; ++j) d[j] = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    cp_async_wait<kStages - 2>();  // this thread's copies of step i have landed
    fence_shared_for_async_proxy();
    __syncthreads();  // everyone's have, and every warpgroup is done with step i - 1's buffer
    if (prefetch > 0) prefetch_step(range.first + i + prefetch);
    if (i + kStages - 1 < count) {
      unsigned char* refill = stage_at(i + kStages - 1);
      w_copies.copy(range.first + i + kStages - 1, k, w, refill);
      x_copies.copy(range.first + i + kStages - 1, k, x, refill + kWTileBytes);
    }
    cp_async_commit();  // possibly empty: keeps "all but the newest kStages - 2 groups" meaning "step i + 1"
    const unsigned char* stage = stage_at(i);
    const unsigned char* a = stage + warpgroup * (kBlockRows / 2 / 8) * kGroupBytes;
    const unsigned char* b = stage + kWTileBytes;
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < kStep / 16; ++q)  // k16 step q: chunks 2q, 2q + 1
      wgmma_bf16<kN>(d, wgmma_descriptor(a + q * 2 * kChunkBytes, kChunkBytes, kGroupBytes),
                     wgmma_descriptor(b + q * 2 * kChunkBytes, kChunkBytes, kGroupBytes));
    wgmma_commit();
    wgmma_wait<0>();
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are dead; the partials take their place

  // d[4j ..] holds w rows (local) r and r + 8 for x rows 8j + 2t and 8j + 2t + 1 (wgmma.h).
  float* partials = reinterpret_cast<float*>(smem);
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int local_row = warpgroup * 64 + (static_cast<int>(threadIdx.x) / 32 % 4) * 16 + g;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    float* p = partials + (8 * j + 2 * t) * kPartStride + local_row;
    p[0] = d[4 * j + 0];
    p[kPartStride] = d[4 * j + 1];
    p[8] = d[4 * j + 2];
    p[kPartStride + 8] = d[4 * j + 3];
  }
  add_slices_and_store<kOutF32>(cluster, partials, rows, block_row0, n, out);
}

template <int kN, int kStages, bool kOutF32>
void launch_width(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                  int slices, int prefetch, cudaStream_t stream) {
  auto* kernel = skinny_wgmma_kernel<kN, kStages, kOutF32>;
  constexpr size_t smem = smem_bytes<kN, kStages>();
  static const bool opted_in =  // once per instantiation
      (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                  "launch_skinny_gemm (wgmma): shared memory opt-in"),
       true);
  (void)opted_in;
  launch_clusters(kernel, kThreads, smem, n, slices, stream, "launch_skinny_gemm (wgmma)", x, rows, w, n, k, out,
                  prefetch);
}

template <int kStages, bool kOutF32>
void launch_rows(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out, int slices,
                 int prefetch, cudaStream_t stream) {
  // The narrowest N that holds the rows: fewer MMA columns and x bytes, the same bits per element.
  if (rows <= 8) return launch_width<8, kStages, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  if (rows <= 16) return launch_width<16, kStages, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  if (rows <= 32) return launch_width<32, kStages, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  return launch_width<64, kStages, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
}

}  // namespace

void launch_wgmma(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& outputs,
                  bool y_f32, int slices, int stages, int prefetch, cudaStream_t stream) {
  slices = std::clamp(slices, 1, kMaxSlices);
  if (stages != 4 && stages != 6) check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm (wgmma): 4 or 6 stages");
  const size_t out_size = y_f32 ? sizeof(float) : sizeof(bf16);
  for (int32_t r0 = 0; r0 < m; r0 += kMaxRows) {
    const int32_t rows = std::min<int32_t>(kMaxRows, m - r0);
    SkinnyOutputs out = outputs;  // each segment's rows from r0 on
    for (int i = 0; i < out.segments; ++i)
      out.y[i] = static_cast<char*>(out.y[i]) + static_cast<size_t>(r0) * static_cast<size_t>(out.width(i)) * out_size;
    const bf16* xr = x + static_cast<int64_t>(r0) * k;
    if (stages == 6) {
      if (y_f32) {
        launch_rows<6, true>(xr, rows, w, n, k, out, slices, prefetch, stream);
      } else {
        launch_rows<6, false>(xr, rows, w, n, k, out, slices, prefetch, stream);
      }
    } else if (y_f32) {
      launch_rows<4, true>(xr, rows, w, n, k, out, slices, prefetch, stream);
    } else {
      launch_rows<4, false>(xr, rows, w, n, k, out, slices, prefetch, stream);
    }
  }
}

}  // namespace duet::backend::cuda::skinny
