// The decode GEMM's warpgroup engine: y[m, n] = sum_k x[m, k] * w[n, k] for up to 64 rows a launch, BF16 in, fp32
// accumulation, by Hopper's wgmma with both operands in shared memory (wgmma.h). The mma.sync engine
// (skinny_gemm.cu) streams w into registers and has every warp read all x rows from shared memory at every step: at
// 64 rows it issued about 450 instructions a warp per 64-wide k step and read the weights at 35-55% of the device's
// rate (docs/benchmarks.md, tenth round). Here the tensor cores read both tiles from shared memory themselves, and a
// step costs a thread six 16-byte loads, twelve 8-byte stores and, per warpgroup, four MMA instructions.
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
// Pipeline: the weights go through registers, as in the mma.sync engine (16-byte loads that skip L1, kAhead steps
// ahead, and L2 prefetches `prefetch` steps ahead), then into shared memory as two 8-byte pieces each, where the k16
// groups want them; x the same way. Two shared-memory buffers: step i's MMAs run (asynchronously) while step i + 1
// is stored into the other one; one block barrier a step. A first form copied global -> shared with 16- and 8-byte
// cp.async and read the weights at 600-2,000 GB/s, 2-4 times slower than mma.sync (docs/benchmarks.md, eleventh
// round).
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
constexpr int kChunk = 8;                      // BF16 per 16-byte load
constexpr int kChunksPerRow = kStep / kChunk;  // 8
// A tile of R rows x one step in shared memory: [R / 8 row groups][8 chunks][8 rows][8 BF16], core matrices of 8 rows
// x 16 bytes; wgmma's k16 step q reads chunks 2q (k slots 0..7) and 2q + 1 (slots 8..15) of every row group. Piece p
// of a row (elements 4p .. 4p + 3; t = p / 4, q = p % 4) is the mma.sync engine's MMA q, so it goes to chunk
// 2q + t / 2, bytes (t % 2) * 8 of the row's 16.
constexpr uint32_t kChunkBytes = 128;                           // one core matrix: 8 rows x 16 bytes
constexpr uint32_t kGroupBytes = 8 * kChunkBytes;               // a row group's whole step
constexpr uint32_t kWTileBytes = kBlockRows / 8 * kGroupBytes;  // 16 KiB
constexpr int kBuffers = 2;                                     // shared-memory steps: one multiplied, one filled

template <int kN>
constexpr size_t stage_bytes() {
  return kWTileBytes + kN / 8 * kGroupBytes;
}
template <int kN>
constexpr size_t smem_bytes() {
  return std::max(kBuffers * stage_bytes<kN>(), sizeof(float) * kN * kPartStride);
}

// Load i of a tile (16 bytes: chunk c of a row, elements 8c .. 8c + 7): row i % 8 of row group i / 64, chunk
// (i / 8) % 8, so a warp's 32 loads read 64 contiguous bytes of each of 8 rows. Its two pieces (2c and 2c + 1) land
// where the k16 groups want them; the 8-byte stores of a warp fall on distinct bank pairs two lanes each.
__device__ __forceinline__ int load_row(int i) { return i / (8 * kChunksPerRow) * 8 + i % 8; }
__device__ __forceinline__ int load_chunk(int i) { return (i / 8) % kChunksPerRow; }
__device__ __forceinline__ uint32_t piece_offset(int i, int p) {
  const int t = p / 4, q = p % 4;
  return static_cast<uint32_t>(i / (8 * kChunksPerRow)) * kGroupBytes +
         static_cast<uint32_t>(2 * q + t / 2) * kChunkBytes + static_cast<uint32_t>(i % 8) * 16 +
         static_cast<uint32_t>(t % 2) * 8;
}

// This thread's loads of one tile, worked out once: the source at step 0 (nullptr: a row past the operand's rows,
// zeros) and where the two pieces go in the tile.
template <int kLoads>
struct TileLoads {
  const bf16* source[kLoads];
  uint32_t low[kLoads], high[kLoads];  // byte offsets of pieces 2c and 2c + 1; low = ~0u: no load for this thread
  int element[kLoads];

  __device__ __forceinline__ TileLoads(const bf16* base, int64_t first_row, int64_t rows, int32_t k, int tile_loads) {
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      const int i = c * kThreads + static_cast<int>(threadIdx.x);
      const int64_t row = first_row + load_row(i);
      const int chunk = load_chunk(i);
      low[c] = i < tile_loads ? piece_offset(i, 2 * chunk) : ~0u;
      high[c] = i < tile_loads ? piece_offset(i, 2 * chunk + 1) : ~0u;
      element[c] = chunk * kChunk;
      source[c] = i < tile_loads && row < rows ? base + row * k + element[c] : nullptr;
    }
  }

  // Step `step` into registers; elements past k and rows past the operand's are zeros. `streamed`: read once
  // (weights: no L1 allocation), else through the read-only path (x, read by every block).
  template <bool kStreamed>
  __device__ __forceinline__ void load(int64_t step, int32_t k, uint4 (&v)[kLoads]) const {
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      const int64_t at = step * kStep;
      const bool valid = low[c] != ~0u && source[c] != nullptr && at + element[c] < k;
      if constexpr (kStreamed) {
        v[c] = valid ? load_weight_chunk(source[c] + at) : make_uint4(0, 0, 0, 0);
      } else {
        v[c] = valid ? __ldg(reinterpret_cast<const uint4*>(source[c] + at)) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  __device__ __forceinline__ void store(const uint4 (&v)[kLoads], unsigned char* tile) const {
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      if (low[c] == ~0u) break;
      *reinterpret_cast<uint2*>(tile + low[c]) = make_uint2(v[c].x, v[c].y);
      *reinterpret_cast<uint2*>(tile + high[c]) = make_uint2(v[c].z, v[c].w);
    }
  }
};

// Registers: kAhead + 1 steps of w and x, a ring; step j in slot j % (kAhead + 1). The loop is unrolled by the ring's
// size so that every slot index is a constant (a register array indexed at run time would spill).
template <int kN, int kAhead, bool kOutF32>
__global__ void __launch_bounds__(kThreads, 2)
    skinny_wgmma_kernel(const bf16* __restrict__ x, int32_t rows, const bf16* __restrict__ w, int32_t n, int32_t k,
                        const SkinnyOutputs out, int prefetch) {
  extern __shared__ __align__(128) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x / slices) * kBlockRows;
  const SliceSteps range(k, slice, slices);
  const int64_t first = range.first, count = range.last - range.first;

  constexpr int kRing = kAhead + 1;
  constexpr int kWLoads = kBlockRows * kChunksPerRow / kThreads;           // 4
  constexpr int kXLoads = (kN * kChunksPerRow + kThreads - 1) / kThreads;  // 1 or 2
  const TileLoads<kWLoads> w_loads(w, block_row0, n, k, kBlockRows * kChunksPerRow);
  auto buffer = [&](int64_t i) { return smem + (i % kBuffers) * stage_bytes<kN>(); };
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

  // The first kRing steps: weights before the wait for the kernel before (they do not depend on it), x after.
  uint4 wv[kRing][kWLoads], xv[kRing][kXLoads];
  for (int64_t s = first + kRing; s < first + prefetch; ++s) prefetch_step(s);
#pragma unroll
  for (int j = 0; j < kRing; ++j)
    if (j < count) w_loads.template load<true>(first + j, k, wv[j]);
  wait_for_prerequisites();
  let_dependents_launch();
  const TileLoads<kXLoads> x_loads(x, 0, rows, k, kN * kChunksPerRow);
#pragma unroll
  for (int j = 0; j < kRing; ++j)
    if (j < count) x_loads.template load<false>(first + j, k, xv[j]);
  if (count > 0) {
    w_loads.store(wv[0], buffer(0));
    x_loads.store(xv[0], buffer(0) + kWTileBytes);
  }
  fence_shared_for_async_proxy();
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  float d[kN / 2];
#pragma unroll
  for (int j = 0; j < kN / 2; ++j) d[j] = 0.0f;
  for (int64_t i0 = 0; i0 < count; i0 += kRing) {
#pragma unroll
    for (int r = 0; r < kRing; ++r) {
      const int64_t i = i0 + r;
      if (i >= count) break;  // the same for the whole block
      // Step i's MMAs, asynchronous, while step i + 1 goes into the other buffer (last read by step i - 1's MMAs,
      // which every warpgroup waited for before the last barrier) and step i + kRing is loaded into step i's slot.
      const unsigned char* stage = buffer(i);
      const unsigned char* a = stage + warpgroup * (kBlockRows / 2 / 8) * kGroupBytes;
      const unsigned char* b = stage + kWTileBytes;
      wgmma_fence();
#pragma unroll
      for (int q = 0; q < kStep / 16; ++q)  // k16 step q: chunks 2q, 2q + 1
        wgmma_bf16<kN>(d, wgmma_descriptor(a + q * 2 * kChunkBytes, kChunkBytes, kGroupBytes),
                       wgmma_descriptor(b + q * 2 * kChunkBytes, kChunkBytes, kGroupBytes));
      wgmma_commit();
      if (i + 1 < count) {
        const int next = (r + 1) % kRing;
        w_loads.store(wv[next], buffer(i + 1));
        x_loads.store(xv[next], buffer(i + 1) + kWTileBytes);
      }
      if (i + kRing < count) {
        w_loads.template load<true>(first + i + kRing, k, wv[r]);
        x_loads.template load<false>(first + i + kRing, k, xv[r]);
      }
      if (prefetch > 0) prefetch_step(first + i + prefetch);
      wgmma_wait<0>();
      fence_shared_for_async_proxy();
      __syncthreads();  // step i + 1 is in place, and no warpgroup reads step i's buffer any more
    }
  }

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

template <int kN, int kAhead, bool kOutF32>
void launch_width(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                  int slices, int prefetch, cudaStream_t stream) {
  auto* kernel = skinny_wgmma_kernel<kN, kAhead, kOutF32>;
  constexpr size_t smem = smem_bytes<kN>();
  static const bool opted_in =  // once per instantiation
      (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                  "launch_skinny_gemm (wgmma): shared memory opt-in"),
       true);
  (void)opted_in;
  launch_clusters(kernel, kThreads, kBlockRows, smem, n, slices, stream, "launch_skinny_gemm (wgmma)", x, rows, w, n, k,
                  out, prefetch);
}

template <int kAhead, bool kOutF32>
void launch_rows(const bf16* x, int32_t rows, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out, int slices,
                 int prefetch, cudaStream_t stream) {
  // The narrowest N that holds the rows: fewer MMA columns and x bytes, the same bits per element.
  if (rows <= 8) return launch_width<8, kAhead, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  if (rows <= 16) return launch_width<16, kAhead, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  if (rows <= 32) return launch_width<32, kAhead, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
  return launch_width<64, kAhead, kOutF32>(x, rows, w, n, k, out, slices, prefetch, stream);
}

}  // namespace

void launch_wgmma(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& outputs,
                  bool y_f32, int slices, int ahead, int prefetch, cudaStream_t stream) {
  slices = std::clamp(slices, 1, kMaxSlices);
  if (ahead != 1 && ahead != 2) check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm (wgmma): 1 or 2 steps ahead");
  const size_t out_size = y_f32 ? sizeof(float) : sizeof(bf16);
  for (int32_t r0 = 0; r0 < m; r0 += kMaxRows) {
    const int32_t rows = std::min<int32_t>(kMaxRows, m - r0);
    SkinnyOutputs out = outputs;  // each segment's rows from r0 on
    for (int i = 0; i < out.segments; ++i)
      out.y[i] = static_cast<char*>(out.y[i]) + static_cast<size_t>(r0) * static_cast<size_t>(out.width(i)) * out_size;
    const bf16* xr = x + static_cast<int64_t>(r0) * k;
    if (ahead == 2) {
      if (y_f32) {
        launch_rows<2, true>(xr, rows, w, n, k, out, slices, prefetch, stream);
      } else {
        launch_rows<2, false>(xr, rows, w, n, k, out, slices, prefetch, stream);
      }
    } else if (y_f32) {
      launch_rows<1, true>(xr, rows, w, n, k, out, slices, prefetch, stream);
    } else {
      launch_rows<1, false>(xr, rows, w, n, k, out, slices, prefetch, stream);
    }
  }
}

}  // namespace duet::backend::cuda::skinny
