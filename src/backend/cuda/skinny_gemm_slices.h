#pragma once
// What the decode GEMM's two tensor-core kernels (skinny_gemm.cu: mma.sync, and wgmma with the weights in registers)
// share: a block owns kBlockRows w rows and one k slice; the slices of a row block are one thread block cluster, whose
// partial sums are added in slice order through distributed shared memory and rounded once, each output to its segment.
#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/activations.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/device_step.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda::skinny {

namespace cg = cooperative_groups;

constexpr int kBlockRows = 128;  // w rows per 8-warp block (and per cluster); the mma.sync kernel may take 4- or
                                 // 2-warp blocks (64 or 32 rows)
constexpr int kStep = 64;        // k per step
constexpr int kMaxSlices = 8;    // k slices = blocks per cluster (8: the portable cluster limit)
// Partial sums, [x row][w row of the block] fp32; the 4 floats of padding make the fragment stores (lanes t = 0..3
// two x rows apart, 2 * (32 m + 4) = 8 modulo 32 banks) land on distinct banks.
constexpr int part_stride(int block_rows) { return block_rows + 4; }
constexpr int kPartStride = part_stride(kBlockRows);

// Slice `slice` of `slices` over k's steps: [first, last), a function of (k, slice, slices) only.
struct SliceSteps {
  int64_t steps, first, last;
  __device__ SliceSteps(int32_t k, int slice, int slices)
      : steps((k + kStep - 1) / kStep), first(slice * steps / slices), last((slice + 1) * steps / slices) {}
};

// The first of the 16 w rows of warp `warp` in row block `block` (blocks of `warps` warps): the block's rows one after
// another, or with SwiGLU in the epilogue (8-warp blocks) its 64 gate rows (warps 0..3) and the same 64 up rows
// (warps 4..7). Which rows a warp reads moves no operation: each output is still its own row's chain.
__device__ __forceinline__ int64_t warp_first_row(const SkinnyOutputs& out, int64_t block, int warp, int warps) {
  if (out.swiglu_half > 0) return (warp < 4 ? 0 : out.swiglu_half) + 64 * block + 16 * (warp % 4);
  return (block * warps + warp) * 16;
}

// The outputs of a launch that starts at x row r0 (a GEMM of more than 64 rows runs in launches of 64): each
// segment's rows from r0 on, SwiGLU's half-width rows alike.
inline SkinnyOutputs outputs_from_row(const SkinnyOutputs& outputs, int32_t r0, bool y_f32) {
  const size_t out_size = y_f32 ? sizeof(float) : sizeof(bf16);
  SkinnyOutputs out = outputs;
  for (int i = 0; i < out.segments; ++i)
    out.y[i] =
        static_cast<char*>(out.y[i]) +
        static_cast<size_t>(r0) * static_cast<size_t>(out.swiglu_half > 0 ? out.swiglu_half : out.width(i)) * out_size;
  return out;
}

// Output column `col` of x row r, to the segment that holds it (SkinnyOutputs: one GEMM over weights concatenated
// at load writes each projection's columns to that projection's own [rows, width] array).
template <bool kOutF32>
__device__ __forceinline__ void store_output(const SkinnyOutputs& out, int r, int64_t col, float sum) {
  // Constant indices only: a parameter array indexed at run time would be copied to local memory.
  void* y = out.y[0];
  int32_t first = 0, width = out.first[1];
#pragma unroll
  for (int i = 1; i < SkinnyOutputs::kMaxSegments; ++i) {
    if (i < out.segments && col >= out.first[i]) {
      y = out.y[i];
      first = out.first[i];
      width = out.first[i + 1] - out.first[i];
    }
  }
  const int64_t at = r * static_cast<int64_t>(width) + (col - first);
  if constexpr (kOutF32) {
    static_cast<float*>(y)[at] = sum;
  } else {
    static_cast<bf16*>(y)[at] = __float2bfloat16_rn(sum);
  }
}

// Every block of the cluster has written its slice's partials ([rows][part_stride(kRows)] at `partials`): the
// cluster's rows x kRows outputs are shared out among its blocks, each summing the slices in slice order. A thread
// reads the slices of kBatch outputs before it adds any: the remote reads (distributed shared memory, hundreds of
// cycles each) overlap instead of running one after another. The sums and their order are the same.
constexpr int kBatch = 4;
template <bool kOutF32, int kRows = kBlockRows>
__device__ __forceinline__ void add_slices_and_store(cg::cluster_group& cluster, float* partials, int rows,
                                                     int64_t block_row0, int32_t n, const SkinnyOutputs& out) {
  const int slices = static_cast<int>(cluster.num_blocks());
  const int slice = static_cast<int>(cluster.block_rank());
  const int threads = static_cast<int>(blockDim.x);
  cluster.sync();             // every slice's partials are written and visible across the cluster
  if (out.swiglu_half > 0) {  // local rows j (gate) and kHalf + j (up) of block b make output column kHalf b + j
    constexpr int kHalf = kRows / 2;
    const int64_t col0 = block_row0 / kRows * kHalf;
    for (int i = slice * threads + static_cast<int>(threadIdx.x); i < rows * kHalf; i += slices * threads) {
      const int r = i / kHalf, j = i % kHalf;
      const int at = r * part_stride(kRows) + j;
      float g = cluster.map_shared_rank(partials, 0)[at], u = cluster.map_shared_rank(partials, 0)[at + kHalf];
      for (int s = 1; s < slices; ++s) {
        g += cluster.map_shared_rank(partials, s)[at];
        u += cluster.map_shared_rank(partials, s)[at + kHalf];
      }
      // Each GEMM output rounded to BF16 as it would be stored, then launch_swiglu's arithmetic on the two.
      const float gate = __bfloat162float(__float2bfloat16_rn(g)), up = __bfloat162float(__float2bfloat16_rn(u));
      static_cast<bf16*>(out.y[0])[r * static_cast<int64_t>(out.swiglu_half) + col0 + j] =
          __float2bfloat16_rn(silu(gate) * up);
    }
    cluster.sync();
    return;
  }
  for (int i = slice * threads + static_cast<int>(threadIdx.x); i < rows * kRows; i += slices * threads) {
    const int r = i / kRows, local = i % kRows;
    const int64_t col = block_row0 + local;
    if (col >= n) continue;
    const int at = r * part_stride(kRows) + local;
    float sum = cluster.map_shared_rank(partials, 0)[at];
    for (int s = 1; s < slices; ++s) sum += cluster.map_shared_rank(partials, s)[at];
    store_output<kOutF32>(out, r, col, sum);
  }
  cluster.sync();  // no block leaves (freeing its shared memory) while another still reads its partials
}

// The cluster launch both engines use: grid = ceil(n / block_rows) row blocks x `slices`, clusters of `slices`,
// launched as a dependent (dependent_launch.h).
template <typename... Params, typename... Args>
void launch_clusters(void (*kernel)(Params...), int threads, int block_rows, size_t smem, int32_t n, int slices,
                     cudaStream_t stream, const char* what, Args... args) {
  const int64_t groups = (static_cast<int64_t>(n) + block_rows - 1) / block_rows;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(groups * slices), 1, 1);
  config.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = static_cast<unsigned>(slices);
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1] = dependent_launch_attribute(what);
  config.attrs = attributes;
  config.numAttrs = 2;
  check_cuda(cudaLaunchKernelEx(&config, kernel, args...), what);
}

}  // namespace duet::backend::cuda::skinny
