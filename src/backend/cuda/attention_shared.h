#pragma once
// What the attention kernels share (attention.cu: decode rows; attention_prefill.cu: prefill rows): the launch
// parameters, the pieces of arithmetic both take the same way (the gated output), and how a block finds its tile.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_step.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda::attention {

constexpr int kKeys = kPagePositions;  // one key block is one page
constexpr int kMaxGroup = 16;          // query heads per KV head
constexpr int kTileQueries = 64;       // queries per prefill block: 64 / group rows x group heads of one KV head

struct AttentionParams {
  DeviceStep step;
  int32_t layer;
  const bf16* q_gate;
  bf16* out;
  int32_t q_heads, kv_heads, group;
  float scale;
  int32_t tile_rows;  // rows per prefill tile: kTileQueries / group
};

__device__ __forceinline__ float bf16_low(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_high(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

__device__ __forceinline__ float softmax_exp(float x) { return expf(x); }

// acc / l times sigmoid(gate), each step explicitly rounded.
__device__ __forceinline__ float gated_output(float acc, float l, float gate) {
  const float sigmoid = __fdiv_rn(1.0f, __fadd_rn(1.0f, softmax_exp(-gate)));
  return __fmul_rn(__fdiv_rn(acc, l), sigmoid);
}

// Keys of a query at `position` inside the key block starting at `block_start` (0 when the block is after it).
__device__ __forceinline__ int keys_in_block(int32_t position, int block_start) {
  return max(0, min(kKeys, position - block_start + 1));
}

// Query head `head` of `row` (its gate follows it: head_dim further on).
__device__ __forceinline__ const bf16* query_ptr(const AttentionParams& p, int row, int head, int head_dim) {
  return p.q_gate + (static_cast<int64_t>(row) * p.q_heads + head) * 2 * head_dim;
}

// Which tile of which prefill piece block `tile` is (tiles of tile_rows rows, counted over the prefill pieces in
// order); false when none. Each warp scans the pieces 32 at a time (a prefix sum of their tile counts), so a decode
// step of many pieces costs a few loads per block; every warp of the block finds the same answer.
__device__ inline bool find_tile(const AttentionParams& p, int tile, int* piece_index, int* first_row, int* rows) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int before = 0;  // tiles of the pieces scanned so far
  for (int base = 0; base < p.step.pieces; base += 32) {
    const int i = base + lane;
    // Decode pieces belong to the decode kernel whatever their size.
    const int piece_rows = i < p.step.pieces && p.step.piece[i].role != DeviceRole::decode ? p.step.piece[i].rows : 0;
    const int tiles = (piece_rows + p.tile_rows - 1) / p.tile_rows;
    int inclusive = tiles;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int x = __shfl_up_sync(kAll, inclusive, offset);
      if (lane >= offset) inclusive += x;
    }
    const unsigned hit = __ballot_sync(kAll, tile < before + inclusive);
    if (hit != 0) {
      const int owner = __ffs(hit) - 1;
      const int local = tile - before - __shfl_sync(kAll, inclusive - tiles, owner);
      *piece_index = base + owner;
      const DevicePiece& piece = p.step.piece[base + owner];
      *first_row = piece.first_row + local * p.tile_rows;
      *rows = min(p.tile_rows, piece.rows - local * p.tile_rows);
      return true;
    }
    before += __shfl_sync(kAll, inclusive, 31);
  }
  return false;
}

// Whether a prefill kernel may find rows of its own (DeviceStep::decode_rows: when the host did not count, yes).
inline bool has_prefill_rows(const DeviceStep& step) { return step.decode_rows < 0 || step.decode_rows < step.rows; }

template <typename Kernel>
void allow_smem(Kernel kernel, int bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

// attention_prefill.cu: every prefill row of the step, on tensor cores (head_dim 32, 64, 128 or 256).
void launch_prefill(const AttentionParams& p, int head_dim, cudaStream_t stream);

}  // namespace duet::backend::cuda::attention
