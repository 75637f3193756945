// The decode GEMM's TMA engine (launch_skinny_gemm_tma in kernels.h; issue 16 item 1). Why: at 64 rows the
// register-fed kernels (skinny_gemm.cu) read the weights at 35-53% of the H200's read rate (27th round). The eleventh
// round's warpgroup engine, both operands in shared memory, was slower still, and its measurements said why: every
// step tied the block's warps to one barrier and to the slowest warp's loads, and cp.async kept too few bytes in
// flight. This is Hopper's own answer to both:
//  - one producer warp brings each step's 128 w rows x 64 k into a ring of stages with two TMA copies (the hardware
//    streams and swizzles them for wgmma: no registers, no per-thread addresses), and x's 64 k of its rows by a third
//    (the same 128-byte swizzle, rows past m zero-filled), all three completing the stage's mbarrier. Until the 32nd
//    round x came by the producer's cp.async, and the producer waited for each stage's copies before issuing the
//    next stage, so the ring was never full: x by TMA read 64 rows 14-60% faster (DUET_SKINNY_TMA_X=cp keeps that
//    form for A/B: the same bytes in the same places, so the same bits);
//  - two consumer warpgroups (64 w rows each) wait only for their stage's mbarrier, multiply it by wgmma (A = w,
//    B = x, both from shared memory) and free it through another mbarrier once the tensor cores are done with it: no
//    block barrier inside the loop, and a ring of 4 stages keeps 64 KB of weights in flight a block; launches of more
//    than 32 rows take blocks of 64 w rows and one consumer warpgroup, three an SM (35th round: at 64 rows a block's
//    consumer is slow, and more blocks reading at once read faster);
//  - the k slices of a row block form a cluster whose partial sums are added in slice order through distributed
//    shared memory and rounded once, each output to its segment, or gate and up through SwiGLU
//    (skinny_gemm_slices.h, as the register-fed kernels do).
// Each output is the chain of its natural k16 groups (16 contiguous k) in order over each slice, from zero, then the
// slices in order: a function of (n, k) alone, never of m or of the other rows (x rows past m are zeros in their own
// columns). The register-fed kernels sum other sets of k (their register layout's), so the two engines' bits differ
// in the last place and a weight never mixes them: the engine is chosen by the weight's shape alone (skinny_tma_for).
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mbarrier.h"
#include "backend/cuda/mma_sync.h"
#include "backend/cuda/skinny_gemm_slices.h"
#include "backend/cuda/skinny_regs_choice.h"
#include "backend/cuda/wgmma.h"

namespace duet::backend::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kStep = skinny::kStep;  // 64 k: one 128-byte swizzle row of BF16
constexpr int kBoxRows = 64;          // w rows a TMA box and a consumer warpgroup's MMA (m64)
constexpr int kBlockRows = 128;       // w rows a block: two consumer warpgroups of 64
constexpr int kSwigluBoxRows = 32;    // a 64-row block's gate (and up) rows with SwiGLU: boxes of 32
// Threads of a block of `wgs` consumer warpgroups (2; 1: 64-row blocks, three an SM) and one producer warp.
constexpr int threads_for(int wgs) { return 128 * wgs + 32; }
// x's rows of a stage: 8 kTiles (up to 64) rows of 64 k, 1,024-byte swizzle atoms like w's.
constexpr int x_stage_bytes(int tiles) { return tiles * 8 * kStep * 2; }
// A block's w rows and a stage's bytes of them: kWgTiles m64 tiles a warpgroup (2: the benchmarks build's experiment
// of 256-row blocks, half the x bytes a w byte at one block an SM).
constexpr int block_rows(int wg_tiles, int wgs = 2) { return kBoxRows * wgs * wg_tiles; }
constexpr int w_stage_bytes(int wg_tiles, int wgs = 2) { return block_rows(wg_tiles, wgs) * kStep * 2; }

// The blocks an SM a kernel is built for: 64-row blocks three; 128-row blocks two while their ring has at most 4 stages
// (about 100 KB of shared memory at 64 rows), else one.
constexpr int blocks_an_sm(int wgs, int stages, int wg_tiles) {
  return wgs == 1 ? 3 : stages <= 4 && wg_tiles == 1 ? 2 : 1;
}

constexpr size_t shared_bytes(int stages, int wg_tiles, int tiles, int wgs = 2) {
  return static_cast<size_t>(stages) * (w_stage_bytes(wg_tiles, wgs) + x_stage_bytes(tiles)) + 16 * stages +
         1024;  // + slack
}

// Box (k0, row0) of the tensor map into shared memory at dst, completing `bar`'s expected bytes.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int32_t k0, int32_t row0, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(bar)
      : "memory");
}

// The first w row of m64 tile `tile` (of 2 kWgTiles) of row block `block`: the block's rows one after another, or with
// SwiGLU in the epilogue (kWgTiles 1) its 64 gate rows and the same 64 up rows (skinny_gemm_slices.h, warp_first_row).
template <int kWgTiles, int kWgs = 2>
__device__ __forceinline__ int32_t tile_first_row(const SkinnyOutputs& out, int64_t block, int tile) {
  if (out.swiglu_half > 0) return static_cast<int32_t>((tile == 0 ? 0 : out.swiglu_half) + kBoxRows * block);
  return static_cast<int32_t>(block * block_rows(kWgTiles, kWgs) + kBoxRows * tile);
}

// kWgs 1: 64-row blocks of one consumer warpgroup, three an SM (launches of more than 32 rows): twice the blocks
// reading at once; each output the same chain, so the same bits at the same slices.
template <int kTiles, bool kOutF32, int kStages, int kWgTiles, bool kXByTma, int kWgs = 2>
__global__ void __launch_bounds__(threads_for(kWgs), blocks_an_sm(kWgs, kStages, kWgTiles))
    tma_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                    const bf16* __restrict__ x, int32_t rows, int32_t n, int32_t k, const SkinnyOutputs out,
                    bool early_w) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // TMA's 128-byte swizzle and the descriptors' atoms need 1,024-byte alignment; every block rounds alike, so a
  // partial's address maps to the same place in each block of the cluster.
  unsigned char* smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  cg::cluster_group cluster = cg::this_cluster();
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  const int64_t block = blockIdx.x / slices;
  const skinny::SliceSteps range(k, slice, slices);
  const int64_t first = range.first, count = range.last - range.first;

  const uint32_t w_stages = smem_address(smem);
  constexpr int kWStageBytes = w_stage_bytes(kWgTiles, kWgs), kRows = block_rows(kWgTiles, kWgs);
  constexpr int kProducer = kWgs * 4;  // the producer warp's index
  const uint32_t x_stages = w_stages + kStages * kWStageBytes;
  constexpr int kXStageBytes = x_stage_bytes(kTiles);
  const uint32_t bars = x_stages + kStages * kXStageBytes;
  auto full = [&](int s) { return bars + 8 * s; };               // the stage's bytes have landed
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };  // both warpgroups are done with the stage
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // The TMA's expected bytes (w's boxes and, by TMA, x's), and with x by cp.async its copies landed and fenced.
      mbarrier_init(full(s), kXByTma ? 1 : 2);
      mbarrier_init(empty(s), kWgs);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  auto load_w = [&](int64_t i) {  // step i's w boxes into its stage, with the stage's whole expected bytes
    const int s = static_cast<int>(i % kStages);
    mbarrier_expect_bytes(full(s), kWStageBytes + (kXByTma ? kXStageBytes : 0));
    const uint32_t ws = w_stages + s * kWStageBytes;
    const auto k0 = static_cast<int32_t>((first + i) * kStep);
    if (kWgs == 1 && out.swiglu_half > 0) {
      // A 64-row block with SwiGLU: its 32 gate rows and the same 32 up rows, two boxes of 32 rows (w_map's box), one
      // above the other as the warpgroup's m64 tile (1,024-byte swizzle atoms, so the same layout as one box).
      const auto first_gate = static_cast<int32_t>(kSwigluBoxRows * block);
      tma_load(ws, &w_map, k0, first_gate, full(s));
      tma_load(ws + kSwigluBoxRows * kStep * 2, &w_map, k0, first_gate + static_cast<int32_t>(out.swiglu_half),
               full(s));
      return;
    }
#pragma unroll
    for (int tile = 0; tile < kWgs * kWgTiles; ++tile)
      tma_load(ws + tile * (kBoxRows * kStep * 2), &w_map, k0, tile_first_row<kWgTiles, kWgs>(out, block, tile),
               full(s));
  };
  // Launched as a dependent (dependent_launch.h), a kernel reads nothing an earlier kernel wrote before that kernel is
  // done. No kernel writes the weights, so with x by TMA the ring's first stages of w are asked for before the wait,
  // in the previous kernel's tail, as the register-fed kernels' L2 prefetches are (DUET_SKINNY_TMA_EARLY=0: after).
  const int64_t early = kXByTma && early_w ? (count < kStages ? count : kStages) : 0;
  if (warp == kProducer && lane == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
    for (int64_t i = 0; i < early; ++i) load_w(i);
  }
  wait_for_prerequisites();
  let_dependents_launch();

  float acc[kWgTiles][kTiles][4];
#pragma unroll
  for (int w = 0; w < kWgTiles; ++w)
#pragma unroll
    for (int j = 0; j < kTiles; ++j) acc[w][j][0] = acc[w][j][1] = acc[w][j][2] = acc[w][j][3] = 0.0f;

  if (warp == kProducer && kXByTma) {  // the producer, x by TMA: one lane issues every copy
    // x's rows [0, 8 kTiles) of each step as one box in the same swizzle as w's (rows past `rows` zero-filled), so
    // the producer never waits on its own copies: the ring's whole depth stays in flight.
    for (int64_t i = 0; lane == 0 && i < count; ++i) {
      const int s = static_cast<int>(i % kStages);
      if (i >= kStages) mbarrier_wait(empty(s), static_cast<uint32_t>((i / kStages - 1) & 1));
      if (i >= early) load_w(i);
      tma_load(x_stages + s * kXStageBytes, &x_map, static_cast<int32_t>((first + i) * kStep), 0, full(s));
    }
  } else if (warp == kProducer) {  // the producer, x by cp.async (DUET_SKINNY_TMA_X=cp)
    for (int64_t i = 0; i < count; ++i) {
      const int s = static_cast<int>(i % kStages);
      if (i >= kStages) mbarrier_wait(empty(s), static_cast<uint32_t>((i / kStages - 1) & 1));
      const int64_t k0 = (first + i) * kStep;
      if (lane == 0) load_w(i);  // the whole boxes count, rows past n and k past k zero-filled
      // x's rows [0, 8 kTiles) of this step, 16-byte chunk c of row r at chunk c ^ (r % 8) of the row (the swizzle
      // TMA gives w); rows past `rows` and k past k as zeros.
      const uint32_t xs = x_stages + s * kXStageBytes;
      for (int c = lane; c < kTiles * 8 * 8; c += 32) {
        const int r = c / 8, chunk = c % 8;
        const int64_t kk = k0 + chunk * 8;
        const bool real = r < rows && kk < k;
        const bf16* src = real ? x + r * static_cast<int64_t>(k) + kk : x;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(xs + r * 128 + ((chunk ^ (r % 8)) << 4)),
                     "l"(src), "r"(real ? 16 : 0)
                     : "memory");
      }
      cp_async_commit();
      // The previous stage's x has landed: each lane orders its copies (the generic proxy) before the tensor cores'
      // reads (the async proxy), then one arrival says so. A stage behind, so the copies' latency overlaps the next
      // stage's issue.
      if (i > 0) {
        cp_async_wait<1>();
        fence_shared_for_async_proxy();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(full(static_cast<int>((i - 1) % kStages)));
      }
    }
    if (count > 0) {
      cp_async_wait<0>();
      fence_shared_for_async_proxy();
      __syncwarp();
      if (lane == 0) mbarrier_arrive(full(static_cast<int>((count - 1) % kStages)));
    }
  } else {  // a consumer warpgroup: the block's m64 tiles group kWgTiles + w
    const int group = warp / 4;
    for (int64_t i = 0; i < count; ++i) {
      const int s = static_cast<int>(i % kStages);
      mbarrier_wait(full(s), static_cast<uint32_t>((i / kStages) & 1));
      wgmma_fence();
      const uint32_t a = w_stages + s * kWStageBytes + group * (kWStageBytes / kWgs);
      const uint32_t b = x_stages + s * kXStageBytes;
#pragma unroll
      for (int j = 0; j < kStep / 16; ++j)
#pragma unroll
        for (int w = 0; w < kWgTiles; ++w)
          wgmma_bf16_shared<kTiles>(acc[w], wgmma_descriptor_sw128(a + w * (kBoxRows * kStep * 2) + 32 * j),
                                    wgmma_descriptor_sw128(b + 32 * j));
      wgmma_commit();
      wgmma_wait<1>();  // the previous step's MMAs are done: its stage may be refilled
      if (i > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(empty(static_cast<int>((i - 1) % kStages)));
    }
    wgmma_wait<0>();
#pragma unroll
    for (int w = 0; w < kWgTiles; ++w) fence_accumulators(acc[w]);
  }
  __syncthreads();  // every MMA has read its stages: the partials may take their place

  // This slice's partial sums, [x row][w row of the block] (wgmma.h: warp w's lane (g, t) holds w rows 16 w + g and
  // + 8 of its tile, x rows 8 j + 2 t and + 1).
  float* partials = reinterpret_cast<float*>(smem);
  if (warp < kProducer) {
    const int g = lane / 4, t = lane % 4;
    constexpr int kStride = skinny::part_stride(kRows);
#pragma unroll
    for (int w = 0; w < kWgTiles; ++w) {
      const int local = ((warp / 4) * kWgTiles + w) * kBoxRows + (warp % 4) * 16 + g;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int r = 8 * j + 2 * t;
        partials[r * kStride + local] = acc[w][j][0];
        partials[(r + 1) * kStride + local] = acc[w][j][1];
        partials[r * kStride + local + 8] = acc[w][j][2];
        partials[(r + 1) * kStride + local + 8] = acc[w][j][3];
      }
    }
  }
  skinny::add_slices_and_store<kOutF32, kRows>(cluster, partials, rows, block * kRows, n, out);
}

// A [rows, k] BF16 matrix's tensor map: boxes of 64 k x box_rows, 128-byte swizzle, zeros out of bounds.
CUtensorMap rows_map(const bf16* base, int32_t rows, int32_t k, uint32_t box_rows, const char* what) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
               "launch_skinny_gemm_tma: cuTensorMapEncodeTiled");
    if (fn == nullptr || found != cudaDriverEntryPointSuccess)
      check_cuda(cudaErrorNotSupported, "launch_skinny_gemm_tma: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {kStep, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    check_cuda(cudaErrorInvalidValue, what);
  return map;
}

// The weights' tensor maps, made once per (w, n, k, box rows) and kept (the weights are resident for the process):
// boxes of 64 k x 64 rows, or x 32 for SwiGLU in 64-row blocks. Launches come from more than one thread (decode steps,
// the decision head's), hence the lock.
const CUtensorMap& weight_map(const bf16* w, int32_t n, int32_t k, uint32_t box_rows) {
  static std::mutex lock;
  static std::map<std::tuple<const bf16*, int32_t, int32_t, uint32_t>, CUtensorMap> maps;
  const std::lock_guard<std::mutex> guard(lock);
  const auto key = std::make_tuple(w, n, k, box_rows);
  if (const auto it = maps.find(key); it != maps.end()) return it->second;
  return maps
      .emplace(key, rows_map(w, n, k, box_rows, "launch_skinny_gemm_tma: cuTensorMapEncodeTiled refused the weight"))
      .first->second;
}

// x by TMA (the default) or by the producer's cp.async (DUET_SKINNY_TMA_X=cp, the 29th round's form, for A/B): the
// same bytes in the same places, so the same bits.
bool x_by_tma() {
  static const bool by_tma = [] {
    const char* v = std::getenv("DUET_SKINNY_TMA_X");
    return v == nullptr || std::string_view(v) != "cp";
  }();
  return by_tma;
}

// DUET_SKINNY_TMA_EARLY=0 asks for w only after the dependent-launch wait (read once, for A/B).
bool early_weights() {
  static const bool early = [] {
    const char* v = std::getenv("DUET_SKINNY_TMA_EARLY");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return early;
}

// The x tiles (8 rows each: 1, 2, 4 or 8) a launch of `rows` takes, as launch.operator()<kTiles>().
template <typename Launch>
void by_tiles(int32_t rows, Launch&& launch) {
  if (rows <= 8) return launch.template operator()<1>();
  if (rows <= 16) return launch.template operator()<2>();
  if (rows <= 32) return launch.template operator()<4>();
  launch.template operator()<8>();
}

template <int kTiles, bool kOutF32, int kStages, int kWgTiles, bool kXByTma, int kWgs = 2>
void launch_engine(const CUtensorMap& map, const bf16* x, int32_t rows, int32_t n, int32_t k, const SkinnyOutputs& out,
                   int slices, cudaStream_t stream) {
  constexpr auto kernel = tma_gemm_kernel<kTiles, kOutF32, kStages, kWgTiles, kXByTma, kWgs>;
  constexpr size_t kSmem = shared_bytes(kStages, kWgTiles, kTiles, kWgs);
  static const bool sized = [] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)),
               "skinny tma: shared memory");
    return true;
  }();
  (void)sized;
  // x's map is made at each launch (a host-side encoding of a few hundred nanoseconds; a graph keeps the one it
  // captured, with the step's own x and rows).
  const CUtensorMap x_map = kXByTma ? rows_map(x, rows, k, kTiles * 8,
                                               "launch_skinny_gemm_tma: cuTensorMapEncodeTiled "
                                               "refused x")
                                    : CUtensorMap{};
  skinny::launch_clusters(kernel, threads_for(kWgs), block_rows(kWgTiles, kWgs), kSmem, n, slices, stream, "skinny tma",
                          map, x_map, x, rows, n, k, out, early_weights());
}

template <int kTiles, bool kOutF32, int kStages, int kWgTiles>
void launch_with(const CUtensorMap& map, const bf16* x, int32_t rows, int32_t n, int32_t k, const SkinnyOutputs& out,
                 int slices, cudaStream_t stream) {
  if (x_by_tma())
    return launch_engine<kTiles, kOutF32, kStages, kWgTiles, true>(map, x, rows, n, k, out, slices, stream);
  launch_engine<kTiles, kOutF32, kStages, kWgTiles, false>(map, x, rows, n, k, out, slices, stream);
}

// 64-row blocks (one consumer warpgroup, three an SM; two with a ring of 6), ring kStages x 1, x by TMA.
template <bool kOutF32, int kStages>
void launch_half_blocks(const CUtensorMap& map, const bf16* x, int32_t rows, int32_t n, int32_t k,
                        const SkinnyOutputs& out, int slices, cudaStream_t stream) {
  by_tiles(rows, [&]<int kTiles>() {
    launch_engine<kTiles, kOutF32, kStages, 1, true, 1>(map, x, rows, n, k, out, slices, stream);
  });
}

// Launches of more rows than this take 64-row blocks (block_rows 0, production's choice; the same bits at the same
// slices). 35th round on an H100, bench_skinny_gemm, GB/s at 1 / 16 / 64 rows, 128-row blocks against 64: the out
// projections 2,198 / 2,083 / 1,746 against 2,230 / 2,123 / 1,903, MLP down 2,662 / 2,561 / 2,316 against 2,682 /
// 2,605 / 2,371, gate | up (two outputs) 2,857 / 2,760 / 2,530 against 2,475 / 2,427 / 2,720: twice the blocks reading
// at once win where each block's consumer is slow (64 rows) and lose on the widest shape at few rows, where the ring's
// bytes in flight an SM decide (3 blocks of 4 x 8 KB against 2 of 4 x 16 KB). In the model: 64 streams +1.9% (6,084
// against 5,970 tok/s), one stream level. DUET_SKINNY_TMA_HALF_ROWS=N (read once; 64: never) moves the line for every
// shape but gate | up's (SwiGLU), which keeps 32.
int32_t half_block_rows_above(bool swiglu) {
  static const int32_t above = [] {
    const char* v = std::getenv("DUET_SKINNY_TMA_HALF_ROWS");
    return v == nullptr ? 32 : std::clamp(std::atoi(v), 0, 64);
  }();
  return swiglu ? std::max(above, 32) : above;
}

// Whether a launch takes 64-row blocks on a ring of 6 stages instead of 4 (DUET_SKINNY_TMA_DEEP=0, read once, turns
// it off for A/B). The same chains, so the same bits: a stage is one 64-k step either way, and 64-row blocks give
// 128-row blocks' bits at the same slices. The rule is the measurement's (43rd round, H100):
// - launches of 16 to 32 rows of the shapes whose k is at most 4,096 (every one but MLP down) whose blocks fit three
//   an SM (6 stages of at most 12 KB): bench_skinny_gemm --tma-blocks at 16 / 24 / 32 rows against production's
//   128-row blocks: gate | up 2,982 / 2,965 / 2,942 GB/s against 2,868 / 2,771 / 2,747, the out projections 2,224 /
//   2,137 / 2,087 against 2,122 / 2,042 / 1,987, qkv|z|b|a and q|k|v 1.4-2.5% faster; MLP down 1-2.5% slower, the LM
//   head (3,880 blocks) level; at 8 rows and below slower (gate | up 2,736 against 2,903);
// - launches of more than 32 rows (64-row blocks already) in one slice whose blocks fit two an SM (6 stages of 16 KB):
//   GDN qkv|z|b|a 2,406 against 2,329 at 64 rows, q|k|v 2,300 against 2,216. Not in several slices: there the out
//   projections read 1,314 against 1,924 and MLP down 1,803 against 2,398 (clusters of four 97 KB blocks do not all
//   find room at once).
// In the model (`duet run`, alternating): 16 streams +0.6%, 24 +0.9%, 32 +0.8%, 64 level, 8 level (where no launch
// changes), the same tokens.
// Tests: set_skinny_tma_deep_for_tests's choice (-1: the environment's).
std::atomic<int> deep_ring_for_tests{-1};
bool deep_ring_for(int32_t rows, int32_t n, int32_t k, int slices, bool swiglu) {
  static const int from_environment = [] {
    const char* v = std::getenv("DUET_SKINNY_TMA_DEEP");
    return v != nullptr && std::string_view(v) == "0" ? 0 : 1;
  }();
  const int for_tests = deep_ring_for_tests.load();
  const int choice = for_tests < 0 ? from_environment : for_tests;
  if (choice == 0 || !x_by_tma()) return false;
  const bool half_blocks_already = rows > half_block_rows_above(swiglu);
  if (choice == 2) return half_blocks_already;
  static const int sms = [] {
    int device = 0, count = 0;
    check_cuda(cudaGetDevice(&device), "launch_skinny_gemm_tma: the device");
    check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "launch_skinny_gemm_tma: SMs");
    return count;
  }();
  const int64_t blocks = (static_cast<int64_t>(n) + kBlockRows / 2 - 1) / (kBlockRows / 2) * slices;
  if (half_blocks_already) return slices == 1 && blocks <= 2 * sms;
  return rows >= 16 && k <= 4096 && blocks <= 3 * sms;
}

template <bool kOutF32, int kStages, int kWgTiles = 1>
void launch_rows(const CUtensorMap& map, const bf16* x, int32_t rows, int32_t n, int32_t k, const SkinnyOutputs& out,
                 int slices, cudaStream_t stream) {
  by_tiles(rows, [&]<int kTiles>() {
    launch_with<kTiles, kOutF32, kStages, kWgTiles>(map, x, rows, n, k, out, slices, stream);
  });
}

}  // namespace

int skinny_tma_slices(int32_t n, int32_t k) {
  // DUET_SKINNY_TMA_SLICES="NxK:S,..." (a measurement switch, read once): shape NxK in S slices, its own bits.
  static const SkinnyRegsChoice chosen = parse_skinny_regs_choice(std::getenv("DUET_SKINNY_TMA_SLICES"));
  if (std::getenv("DUET_SKINNY_TMA_SLICES") != nullptr)
    for (int i = 0; i < chosen.count; ++i)
      if (chosen.entries[i].n == n && chosen.entries[i].k == k)
        return std::clamp(chosen.entries[i].min_rows, 1, skinny::kMaxSlices);
  // One block an SM of an H100 or H200 (132) over the row blocks, at most 8 (a portable cluster) and at most k's
  // steps: with x by TMA every block keeps its ring full, and fewer slices read faster at every shape than the two
  // blocks an SM of the 29th round (32nd round: GDN qkv | z | b | a 2,340 GB/s at 64 rows in 1 slice against 2,264 in
  // 2; the out projections 1,751 in 4 against 1,362 in 8). A constant, not the device's SM count: the slices fix the
  // order of summation, so a smaller GPU runs the same slices in more waves rather than computing other bits.
  constexpr int64_t kResidentBlocks = 132;
  const int64_t row_blocks = (static_cast<int64_t>(n) + kBlockRows - 1) / kBlockRows;
  const int64_t steps = (static_cast<int64_t>(k) + kStep - 1) / kStep;
  return static_cast<int>(
      std::clamp<int64_t>(std::min<int64_t>(kResidentBlocks / row_blocks, steps), 1, skinny::kMaxSlices));
}

void set_skinny_tma_deep_for_tests(int choice) { deep_ring_for_tests.store(choice); }

SkinnyTmaBlocks skinny_tma_blocks(int32_t rows, int32_t n, int32_t k, bool swiglu, int slices) {
  if (slices == 0) slices = skinny_tma_slices(n, k);
  if (deep_ring_for(rows, n, k, slices, swiglu)) return {kBlockRows / 2, 6};
  return {x_by_tma() && rows > half_block_rows_above(swiglu) ? kBlockRows / 2 : kBlockRows, 4};
}

void launch_skinny_gemm_tma(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& outputs,
                            bool y_f32, cudaStream_t stream, int slices, int stages, int block_rows_wanted) {
  if (k <= 0 || k % 16 != 0 || n <= 0 || m < 0)
    check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm_tma: k a positive multiple of 16, n positive");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0)
    check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm_tma: x and w must be 16-byte aligned");
  if (outputs.swiglu_half > 0 && (y_f32 || outputs.swiglu_half % 64 != 0 || n != 2 * outputs.swiglu_half))
    check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm_tma: SwiGLU takes BF16 out and halves of 64 rows");
  if (slices == 0) slices = skinny_tma_slices(n, k);
  if (slices < 1 || slices > skinny::kMaxSlices || (stages != 4 && stages != 6 && stages != 8) ||
      (stages == 6 && block_rows_wanted != kBlockRows / 2))
    check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm_tma: slices 1..8, stages 4 or 8 (6: 64-row blocks)");
  if (block_rows_wanted != 0 && block_rows_wanted != kBlockRows &&
      ((block_rows_wanted != 2 * kBlockRows && block_rows_wanted != kBlockRows / 2) ||
       (stages != 4 && !(stages == 6 && block_rows_wanted == kBlockRows / 2)) ||
       (block_rows_wanted > kBlockRows && (outputs.swiglu_half > 0 || y_f32)) ||
       (block_rows_wanted < kBlockRows && !x_by_tma())))
    check_cuda(cudaErrorInvalidValue,
               "launch_skinny_gemm_tma: 256-row blocks (BF16 out, no SwiGLU) at 4 stages or 64-row ones (x by TMA) at "
               "4 or 6");
#ifndef DUET_SKINNY_EXPERIMENTS
  if (stages != 4 || block_rows_wanted > kBlockRows)
    check_cuda(cudaErrorInvalidValue, "launch_skinny_gemm_tma: the experiments are in a benchmarks build only");
#endif
  const bool swiglu = outputs.swiglu_half > 0;
  for (int32_t r0 = 0; r0 < m; r0 += 64) {  // 64 rows a launch, each reading w again
    const int32_t rows = std::min<int32_t>(64, m - r0);
    const SkinnyOutputs out = skinny::outputs_from_row(outputs, r0, y_f32);
    const bf16* xr = x + static_cast<int64_t>(r0) * k;
    // Production's blocks (block_rows 0 at 4 stages), or those asked for.
    const SkinnyTmaBlocks blocks =
        block_rows_wanted == 0 && stages == 4
            ? skinny_tma_blocks(rows, n, k, swiglu, slices)
            : SkinnyTmaBlocks{block_rows_wanted == 0 ? kBlockRows : block_rows_wanted, stages};
    const bool deep = blocks.stages == 6;
    if (blocks.block_rows == kBlockRows / 2 && (blocks.stages == 4 || deep)) {
      const CUtensorMap& map = weight_map(w, n, k, swiglu ? kSwigluBoxRows : kBoxRows);
      if (y_f32) {
        deep ? launch_half_blocks<true, 6>(map, xr, rows, n, k, out, slices, stream)
             : launch_half_blocks<true, 4>(map, xr, rows, n, k, out, slices, stream);
      } else {
        deep ? launch_half_blocks<false, 6>(map, xr, rows, n, k, out, slices, stream)
             : launch_half_blocks<false, 4>(map, xr, rows, n, k, out, slices, stream);
      }
      continue;
    }
    const CUtensorMap& map = weight_map(w, n, k, kBoxRows);
#ifdef DUET_SKINNY_EXPERIMENTS
    if (block_rows_wanted > kBlockRows) {
      launch_rows<false, 4, 2>(map, xr, rows, n, k, out, slices, stream);
      continue;
    }
    if (stages == 8) {
      if (y_f32) {
        launch_rows<true, 8>(map, xr, rows, n, k, out, slices, stream);
      } else {
        launch_rows<false, 8>(map, xr, rows, n, k, out, slices, stream);
      }
      continue;
    }
#endif
    if (y_f32) {
      launch_rows<true, 4>(map, xr, rows, n, k, out, slices, stream);
    } else {
      launch_rows<false, 4>(map, xr, rows, n, k, out, slices, stream);
    }
  }
}

}  // namespace duet::backend::cuda
