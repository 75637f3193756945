#pragma once
// What the attention kernels share (attention.cu: decode rows; attention_prefill.cu: prefill rows): the launch
// parameters, the pieces of arithmetic both take the same way (the gated output), and how a block finds its tile.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_step.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda::attention {

constexpr int kKeys = kPagePositions;    // one key block is one page
constexpr int kMaxGroup = 16;            // query heads per KV head
constexpr int kTileQueries = 64;         // queries per prefill block: 64 / group rows x group heads of one KV head
constexpr int kDecodeCluster = 8;        // decode-kernel blocks per (row, KV head): the portable cluster size
constexpr int kMaxDecodeClusters = 256;  // decode-kernel clusters per KV head; each takes rows this many apart

struct AttentionParams {
  DeviceStep step;
  int32_t layer;
  const bf16* q_gate;
  bf16* out;
  int32_t q_heads, kv_heads, group;
  float scale;
  int32_t tile_rows;  // rows per prefill tile: kTileQueries / group
  // The lanes decode form's split of a row's keys over the cluster (attention_decode_lanes.cu): 0 by key blocks of 64
  // (decode_split, as the cluster form), 1 by runs of 32 keys (DUET_ATTN_LANES_SPLIT=keys: its own bits).
  int32_t lanes_key_split = 0;
  // The lanes form's blocks of one (row, KV head, cluster rank): 1, or the group's queries split over this many blocks
  // (blockIdx.y = KV head x query_split + part), each with the same keys and its own queries
  // (attention_decode_lanes.cu: a query's arithmetic is the same whichever block holds it, so the same bits).
  int32_t query_split = 1;
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

// A decode row's key blocks over its cluster's blocks (the decode kernels): with P = position / 64 + 1 key blocks and
// per = ceil(P / kDecodeCluster), block `rank` takes key blocks [first, last) = [rank per, min((rank + 1) per, P));
// the first `active` blocks have at least one. It depends on the row's position alone.
struct DecodeSplit {
  int first, last, active;
};
__device__ __forceinline__ DecodeSplit decode_split(int32_t position, int rank) {
  const int key_blocks = position / kKeys + 1;
  const int per = (key_blocks + kDecodeCluster - 1) / kDecodeCluster;
  DecodeSplit s;
  s.active = (key_blocks + per - 1) / per;
  s.first = rank * per;
  s.last = min(s.first + per, key_blocks);
  return s;
}

// The decode kernels' last step, after a cluster barrier: the `active` blocks of the cluster each left their partial
// state of the row's `queries` queries from the group's `first_query` (m_s[g], l_s[g], part[g D + d], g counted from
// first_query) in their shared memory; each block writes a slice of those queries x D outputs, merging the states in
// rank order:
//   M = max_r m_r,  c_r = exp(m_r - M),  l = l_0 c_0, then l = fma(l_r, c_r, l) for r = 1 .. active-1;  acc likewise
//   out = bf16((acc / l) * sigmoid(gate))
template <int D, int kThreads>
__device__ __forceinline__ void merge_cluster_states(const AttentionParams& p,
                                                     cooperative_groups::cluster_group& cluster, int rank, int active,
                                                     int row, int kvh, int first_query, int queries, float* m_s,
                                                     float* l_s, float* part) {
  const int G = p.group;
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < queries * D; e += kDecodeCluster * kThreads) {
    const int g = e / D, d = e % D;
    float m_r[kDecodeCluster];
    float m = -INFINITY;
#pragma unroll
    for (int r = 0; r < kDecodeCluster; ++r) {
      m_r[r] = r < active ? *cluster.map_shared_rank(m_s + g, r) : -INFINITY;
      m = fmaxf(m, m_r[r]);
    }
    float c = softmax_exp(__fsub_rn(m_r[0], m));
    float l = __fmul_rn(*cluster.map_shared_rank(l_s + g, 0), c);
    float a = __fmul_rn(*cluster.map_shared_rank(part + e, 0), c);
#pragma unroll
    for (int r = 1; r < kDecodeCluster; ++r) {
      if (r >= active) break;
      c = softmax_exp(__fsub_rn(m_r[r], m));
      l = __fmaf_rn(*cluster.map_shared_rank(l_s + g, r), c, l);
      a = __fmaf_rn(*cluster.map_shared_rank(part + e, r), c, a);
    }
    const int head = kvh * G + first_query + g;
    const float gate = __bfloat162float(query_ptr(p, row, head, D)[D + d]);
    p.out[(static_cast<int64_t>(row) * p.q_heads + head) * D + d] = __float2bfloat16(gated_output(a, l, gate));
  }
}

// Whether a prefill kernel may find rows of its own (DeviceStep::decode_rows: when the host did not count, yes).
inline bool has_prefill_rows(const DeviceStep& step) { return step.decode_rows < 0 || step.decode_rows < step.rows; }

template <typename Kernel>
void allow_smem(Kernel kernel, int bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

// attention_prefill.cu: every prefill row of the step, on tensor cores (head_dim 32, 64, 128 or 256).
void launch_prefill(const AttentionParams& p, int head_dim, cudaStream_t stream);

// attention_decode_lanes.cu: every decode row of the step in the lanes form, when it takes the shape (group x head_dim
// fits a warp) and DUET_ATTN_DECODE is not "cluster"; false when it launched nothing (the cluster form's turn).
bool launch_decode_lanes(const AttentionParams& p, int head_dim, cudaStream_t stream);

}  // namespace duet::backend::cuda::attention
