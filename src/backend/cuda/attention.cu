// Causal softmax attention over the paged KV cache, with the output gate.
//
// The arithmetic of one query (a row and a query head), the same in both prefill kernels below bit for bit:
//   m = -inf, l = 0, acc[d] = 0
//   for each key block b = 0 .. position / 64 (keys 64b .. min(64b + 63, position), one page):
//     s_t  = fp32(dot(q, k_t)) * scale         dot: one fma chain over d = 0 .. head_dim-1, starting from 0
//     m'   = max(m, max_t s_t)                  (max is exact, so its order does not matter)
//     c    = exp(m - m'),  p_t = exp(s_t - m')
//     l    = l * c, then l += p_t for t ascending
//     acc  = acc * c, then acc = fma(p_t, v_t, acc) for t ascending
//   out = bf16((acc / l) * sigmoid(gate))
// Every step is an explicitly rounded intrinsic (no contraction left to the compiler), so the value depends only on
// the row's position and its sequence's data: not on the other rows, the pieces, the cuts, nor the kernel.
//
// Prefill rows take it as it stands, in one of two kernels:
//  - attention_rows_kernel: one block per (row, KV head) serving the KV head's query heads; the rows of short
//    prefill pieces.
//  - attention_tiles_kernel: one block per (64 queries of a piece: 64 / group rows x group heads, KV head); each K/V
//    tile in shared memory serves all the tile's queries. Prefill pieces of at least half a tile of rows.
//
// Decode rows (pieces with DeviceRole::decode, whatever their size) take attention_decode_kernel instead: walking
// every key in one block leaves a long decode row on kv_heads SMs, so a cluster of kCluster blocks shares the row's
// key blocks. With P = position / 64 + 1 key blocks, per = ceil(P / kCluster) and A = ceil(P / per), block r of the
// cluster runs the loop above (from m = -inf, l = 0, acc = 0) over key blocks [r per, min((r + 1) per, P)) for
// r < A, and the cluster merges the A partial states (m_r, l_r, acc_r) through distributed shared memory, in r order:
//   M = max_r m_r,  c_r = exp(m_r - M)
//   l = l_0 * c_0, then l = fma(l_r, c_r, l) for r = 1 .. A-1;  acc likewise
//   out = bf16((acc / l) * sigmoid(gate))
// The split depends on the row's position alone, the merge order is fixed, and which block of which cluster serves
// a row changes no operation, so a decode row's bits depend only on its sequence and position: not on the other
// rows, their number nor their roles. They may differ in the last bits from the same row computed as a prefill
// row (architecture.md allows it).
//
// Which piece goes where is read on the device (a block whose row or tile belongs to another kernel returns at once,
// or skips it); a kernel that would find no row at all, by the host's count of decode rows, is not launched.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeys = kPagePositions;    // one key block is one page
constexpr int kMaxGroup = 16;            // query heads per KV head
constexpr int kTileQueries = 64;         // queries per tiles-kernel block
constexpr int kCluster = 8;              // decode-kernel blocks per (row, KV head): the portable cluster size
constexpr int kMaxDecodeClusters = 256;  // decode-kernel clusters per KV head; each takes rows this many apart

// Q and K rows in shared memory are padded by 4 BF16 (8 bytes): 8-byte loads of 16 consecutive rows then hit
// distinct banks.
template <int D>
constexpr int kStride = D + 4;

struct AttentionParams {
  DeviceStep step;
  int32_t layer;
  const bf16* q_gate;
  bf16* out;
  int32_t q_heads, kv_heads, group;
  float scale;
  int32_t tiled_min_rows;  // pieces with at least this many rows go to the tiles kernel
  int32_t tile_rows;       // rows per tile: kTileQueries / group
};

// ---- The shared arithmetic.

__device__ __forceinline__ float bf16_low(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_high(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

// One fma step per element of 4 BF16 values held as two 32-bit words, in ascending d.
__device__ __forceinline__ float dot4(uint2 q, uint2 k, float acc) {
  acc = __fmaf_rn(bf16_low(q.x), bf16_low(k.x), acc);
  acc = __fmaf_rn(bf16_high(q.x), bf16_high(k.x), acc);
  acc = __fmaf_rn(bf16_low(q.y), bf16_low(k.y), acc);
  return __fmaf_rn(bf16_high(q.y), bf16_high(k.y), acc);
}

__device__ __forceinline__ float softmax_exp(float x) { return expf(x); }

__device__ __forceinline__ float gated_output(float acc, float l, float gate) {
  const float sigmoid = __fdiv_rn(1.0f, __fadd_rn(1.0f, softmax_exp(-gate)));
  return __fmul_rn(__fdiv_rn(acc, l), sigmoid);
}

// Keys of a query at `position` inside the key block starting at `block_start` (0 when the block is after it).
__device__ __forceinline__ int keys_in_block(int32_t position, int block_start) {
  return max(0, min(kKeys, position - block_start + 1));
}

// Copies keys [0, n) of a page (KV head rows `row_stride` apart) into shared K (padded rows) and V (dense rows).
template <int D>
__device__ void load_kv_tile(const bf16* key, const bf16* value, int64_t row_stride, int n, bf16* ks, bf16* vs) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < n * kChunks; i += kThreads) {
    const int t = i / kChunks, c = i % kChunks;
    const uint4 kk = __ldg(reinterpret_cast<const uint4*>(key + t * row_stride + c * 8));
    const uint4 vv = __ldg(reinterpret_cast<const uint4*>(value + t * row_stride + c * 8));
    uint2* kd = reinterpret_cast<uint2*>(ks + t * kStride<D> + c * 8);
    kd[0] = make_uint2(kk.x, kk.y);
    kd[1] = make_uint2(kk.z, kk.w);
    *reinterpret_cast<uint4*>(vs + t * D + c * 8) = vv;
  }
}

// Copies one query (head_dim BF16) into a padded shared row, or zeros when `src` is null (a tile's unused query).
template <int D>
__device__ void load_query(const bf16* src, bf16* dst, int lane, int lanes) {
  for (int c = lane; c < D / 8; c += lanes) {
    const uint4 x = src ? __ldg(reinterpret_cast<const uint4*>(src + c * 8)) : make_uint4(0, 0, 0, 0);
    uint2* d = reinterpret_cast<uint2*>(dst + c * 8);
    d[0] = make_uint2(x.x, x.y);
    d[1] = make_uint2(x.z, x.w);
  }
}

__device__ __forceinline__ const bf16* query_ptr(const AttentionParams& p, int row, int head, int head_dim) {
  return p.q_gate + (static_cast<int64_t>(row) * p.q_heads + head) * 2 * head_dim;
}

// ---- The rows kernel: one block per (row, KV head).

template <int D>
struct RowsSmem {
  static constexpr int kKBytes = kKeys * kStride<D> * 2;
  static constexpr int kVBytes = kKeys * D * 2;
  static constexpr int kQBytes = kMaxGroup * kStride<D> * 2;
  static constexpr int kSBytes = kMaxGroup * kKeys * 4;
  static constexpr int kStatBytes = 3 * kMaxGroup * 4;
  static constexpr int kBytes = kKBytes + kVBytes + kQBytes + kSBytes + kStatBytes;
};

// One key block of the rows arithmetic, between the block's K/V load and the barrier that ends it: scores, softmax
// statistics, then P.V into the thread's accumulators. K (padded rows), V (dense rows) and the G queries are in
// shared memory; n keys of the block count. Thread t owns dim t % D of queries t / D + (256 / D) * j, j < kJ.
template <int D, int kJ>
__device__ __forceinline__ void rows_key_block(const bf16* qs, const bf16* ks, const bf16* vs, float* ss, float* m_s,
                                               float* l_s, float* c_s, int G, int n, float scale, float (&acc)[kJ]) {
  const int tid = threadIdx.x;
  // Scores: one thread per (query, key), the dot as one chain in ascending d.
  for (int item = tid; item < G * kKeys; item += kThreads) {
    const int g = item / kKeys, t = item % kKeys;
    if (t >= n) continue;
    const uint2* q2 = reinterpret_cast<const uint2*>(qs + g * kStride<D>);
    const uint2* k2 = reinterpret_cast<const uint2*>(ks + t * kStride<D>);
    float dot = 0.0f;
#pragma unroll 8
    for (int i = 0; i < D / 4; ++i) dot = dot4(q2[i], k2[i], dot);
    ss[g * kKeys + t] = __fmul_rn(dot, scale);
  }
  __syncthreads();

  // Softmax statistics: one warp per query; the exact max by shuffles, then p, then l summed in key order.
  const int warp = tid >> 5, lane = tid & 31;
  for (int g = warp; g < G; g += kWarps) {
    float* s = ss + g * kKeys;
    const float s0 = lane < n ? s[lane] : -INFINITY;
    const float s1 = lane + 32 < n ? s[lane + 32] : -INFINITY;
    float block_max = fmaxf(s0, s1);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, offset));
    const float m_old = m_s[g];
    const float m_new = fmaxf(m_old, block_max);
    if (lane < n) s[lane] = softmax_exp(__fsub_rn(s0, m_new));
    if (lane + 32 < n) s[lane + 32] = softmax_exp(__fsub_rn(s1, m_new));
    __syncwarp();
    if (lane == 0) {
      const float c = softmax_exp(__fsub_rn(m_old, m_new));
      float l = __fmul_rn(l_s[g], c);
      for (int t = 0; t < n; ++t) l = __fadd_rn(l, s[t]);
      l_s[g] = l;
      m_s[g] = m_new;
      c_s[g] = c;
    }
  }
  __syncthreads();

  // P.V: each accumulator rescaled, then one fma per key in ascending order.
  constexpr int kQueriesPerPass = kThreads / D;
  const int dim = tid % D, query0 = tid / D;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int g = query0 + kQueriesPerPass * j;
    if (g < G) acc[j] = __fmul_rn(acc[j], c_s[g]);
  }
  for (int t = 0; t < n; ++t) {
    const float v = __bfloat162float(vs[t * D + dim]);
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int g = query0 + kQueriesPerPass * j;
      if (g < G) acc[j] = __fmaf_rn(ss[g * kKeys + t], v, acc[j]);
    }
  }
}

// kJ: queries per thread in the P.V product (see rows_key_block).
template <int D, int kJ>
__global__ void __launch_bounds__(kThreads) attention_rows_kernel(AttentionParams p) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  static_assert(D % 32 == 0 && D <= kThreads, "one P.V dim per thread");
  extern __shared__ __align__(16) unsigned char smem[];
  using S = RowsSmem<D>;
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = reinterpret_cast<bf16*>(smem + S::kKBytes);
  bf16* qs = reinterpret_cast<bf16*>(smem + S::kKBytes + S::kVBytes);
  float* ss = reinterpret_cast<float*>(smem + S::kKBytes + S::kVBytes + S::kQBytes);  // [group][64] s, then p
  float* m_s = ss + kMaxGroup * kKeys;
  float* l_s = m_s + kMaxGroup;
  float* c_s = l_s + kMaxGroup;

  const int row = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
  const DevicePiece piece = p.step.piece[p.step.row_piece[row]];
  // The decode kernel computes decode rows, the tiles kernel long prefill pieces.
  if (piece.role == DeviceRole::decode || piece.rows >= p.tiled_min_rows) return;
  const int32_t position = p.step.row_position[row];
  const int G = p.group;

  for (int g = tid / (D / 8); g < G; g += kThreads / (D / 8))
    load_query<D>(query_ptr(p, row, kvh * G + g, D), qs + g * kStride<D>, tid % (D / 8), D / 8);
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  constexpr int kQueriesPerPass = kThreads / D;
  const int dim = tid % D, query0 = tid / D;
  float acc[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) acc[j] = 0.0f;

  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;
  for (int block_start = 0; block_start <= position; block_start += kKeys) {
    const int n = keys_in_block(position, block_start);
    const bf16* key = kv_key(piece, p.step.page_table, p.layer, block_start, kvh, p.kv_heads, D);
    load_kv_tile<D>(key, key + kv_page_elems(p.kv_heads, D), row_stride, n, ks, vs);
    __syncthreads();
    rows_key_block<D, kJ>(qs, ks, vs, ss, m_s, l_s, c_s, G, n, p.scale, acc);
    __syncthreads();  // K, V and p are overwritten by the next block
  }

#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int g = query0 + kQueriesPerPass * j;
    if (g >= G) continue;
    const int head = kvh * G + g;
    const float gate = __bfloat162float(query_ptr(p, row, head, D)[D + dim]);
    p.out[(static_cast<int64_t>(row) * p.q_heads + head) * D + dim] =
        __float2bfloat16(gated_output(acc[j], l_s[g], gate));
  }
}

// ---- The decode kernel: one cluster of kCluster blocks per (decode row, KV head).

// One key block's K and V chunks of this thread, in registers: the next block's loads are in flight while the
// current one is computed.
template <int D>
struct KvChunks {
  static constexpr int kChunks = D / 8;                          // 16-byte chunks per key row
  static constexpr int kPerThread = kKeys * kChunks / kThreads;  // chunk i of the block: tid + kThreads * j
  uint4 k[kPerThread], v[kPerThread];
};

// Loads keys [0, n) of the key block at `key` (KV head rows `row_stride` apart, values `value_offset` further on).
template <int D>
__device__ __forceinline__ void fetch_kv(const bf16* key, int64_t row_stride, int64_t value_offset, int n,
                                         KvChunks<D>& r) {
  constexpr int kChunks = KvChunks<D>::kChunks;
#pragma unroll
  for (int j = 0; j < KvChunks<D>::kPerThread; ++j) {
    const int i = threadIdx.x + kThreads * j, t = i / kChunks, c = i % kChunks;
    if (t < n) {
      const bf16* src = key + t * row_stride + c * 8;
      r.k[j] = __ldg(reinterpret_cast<const uint4*>(src));
      r.v[j] = __ldg(reinterpret_cast<const uint4*>(src + value_offset));
    } else {
      r.k[j] = r.v[j] = make_uint4(0, 0, 0, 0);
    }
  }
}

// Stores what fetch_kv loaded into shared K (padded rows) and V (dense rows), as load_kv_tile lays them out.
template <int D>
__device__ __forceinline__ void store_kv(const KvChunks<D>& r, int n, bf16* ks, bf16* vs) {
  constexpr int kChunks = KvChunks<D>::kChunks;
#pragma unroll
  for (int j = 0; j < KvChunks<D>::kPerThread; ++j) {
    const int i = threadIdx.x + kThreads * j, t = i / kChunks, c = i % kChunks;
    if (t >= n) continue;
    uint2* kd = reinterpret_cast<uint2*>(ks + t * kStride<D> + c * 8);
    kd[0] = make_uint2(r.k[j].x, r.k[j].y);
    kd[1] = make_uint2(r.k[j].z, r.k[j].w);
    *reinterpret_cast<uint4*>(vs + t * D + c * 8) = r.v[j];
  }
}

// The cluster's blocks cover rows cluster, cluster + clusters, ... (only decode rows do work); for each, block `rank`
// runs its share of the key blocks with the rows arithmetic, leaves (m, l, acc) in its shared memory, and after a
// cluster barrier each block merges a slice of the G x D outputs from all the partial states, in rank order.
template <int D, int kJ>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, 2)
    attention_decode_kernel(AttentionParams p) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  static_assert(D % 32 == 0 && D <= kThreads, "one P.V dim per thread");
  static_assert(kMaxGroup * D * 4 <= RowsSmem<D>::kKBytes, "the partial acc fits where K was");
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char smem[];
  using S = RowsSmem<D>;
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = reinterpret_cast<bf16*>(smem + S::kKBytes);
  bf16* qs = reinterpret_cast<bf16*>(smem + S::kKBytes + S::kVBytes);
  float* ss = reinterpret_cast<float*>(smem + S::kKBytes + S::kVBytes + S::kQBytes);
  float* m_s = ss + kMaxGroup * kKeys;
  float* l_s = m_s + kMaxGroup;
  float* c_s = l_s + kMaxGroup;
  float* part = reinterpret_cast<float*>(smem);  // [G][D] acc once the key blocks are done (K is free then)

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int clusters = gridDim.x / kCluster;
  const int kvh = blockIdx.y, tid = threadIdx.x, G = p.group;
  constexpr int kQueriesPerPass = kThreads / D;
  const int dim = tid % D, query0 = tid / D;
  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;
  const int64_t value_offset = kv_page_elems(p.kv_heads, D);

  // Every block of a cluster takes the same rows and the same branches around the cluster barriers.
  for (int row = blockIdx.x / kCluster; row < p.step.rows; row += clusters) {
    const DevicePiece piece = p.step.piece[p.step.row_piece[row]];
    if (piece.role != DeviceRole::decode) continue;
    const int32_t position = p.step.row_position[row];
    const int key_blocks = position / kKeys + 1;
    const int per = (key_blocks + kCluster - 1) / kCluster;
    const int active = (key_blocks + per - 1) / per;  // ranks with at least one key block
    const int first = rank * per, last = min(first + per, key_blocks);

    if (first < last) {
      for (int g = tid / (D / 8); g < G; g += kThreads / (D / 8))
        load_query<D>(query_ptr(p, row, kvh * G + g, D), qs + g * kStride<D>, tid % (D / 8), D / 8);
    }
    if (tid < G) {
      m_s[tid] = -INFINITY;
      l_s[tid] = 0.0f;
    }
    float acc[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) acc[j] = 0.0f;

    KvChunks<D> chunks;
    if (first < last) {
      const int block_start = first * kKeys;
      fetch_kv<D>(kv_key(piece, p.step.page_table, p.layer, block_start, kvh, p.kv_heads, D), row_stride, value_offset,
                  keys_in_block(position, block_start), chunks);
    }
    for (int b = first; b < last; ++b) {
      const int n = keys_in_block(position, b * kKeys);
      store_kv<D>(chunks, n, ks, vs);
      __syncthreads();
      if (b + 1 < last) {
        const int next_start = (b + 1) * kKeys;
        fetch_kv<D>(kv_key(piece, p.step.page_table, p.layer, next_start, kvh, p.kv_heads, D), row_stride, value_offset,
                    keys_in_block(position, next_start), chunks);
      }
      rows_key_block<D, kJ>(qs, ks, vs, ss, m_s, l_s, c_s, G, n, p.scale, acc);
      __syncthreads();  // K, V and p are overwritten by the next block
    }

    // The partial state: m and l stay in m_s and l_s, acc goes where K was (the loop's last barrier freed it).
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int g = query0 + kQueriesPerPass * j;
      if (g < G) part[g * D + dim] = acc[j];
    }
    cluster.sync();  // every partial state written and visible to the cluster

    for (int e = rank * kThreads + tid; e < G * D; e += kCluster * kThreads) {
      const int g = e / D, d = e % D;
      float m_r[kCluster];
      float m = -INFINITY;
#pragma unroll
      for (int r = 0; r < kCluster; ++r) {
        m_r[r] = r < active ? *cluster.map_shared_rank(m_s + g, r) : -INFINITY;
        m = fmaxf(m, m_r[r]);
      }
      float c = softmax_exp(__fsub_rn(m_r[0], m));
      float l = __fmul_rn(*cluster.map_shared_rank(l_s + g, 0), c);
      float a = __fmul_rn(*cluster.map_shared_rank(part + e, 0), c);
#pragma unroll
      for (int r = 1; r < kCluster; ++r) {
        if (r >= active) break;
        c = softmax_exp(__fsub_rn(m_r[r], m));
        l = __fmaf_rn(*cluster.map_shared_rank(l_s + g, r), c, l);
        a = __fmaf_rn(*cluster.map_shared_rank(part + e, r), c, a);
      }
      const int head = kvh * G + g;
      const float gate = __bfloat162float(query_ptr(p, row, head, D)[D + d]);
      p.out[(static_cast<int64_t>(row) * p.q_heads + head) * D + d] = __float2bfloat16(gated_output(a, l, gate));
    }
    cluster.sync();  // no block rewrites (or exits with) its shared memory while another still reads it
  }
}

// ---- The tiles kernel: one block per (64 queries of one piece, KV head).

template <int D>
struct TilesSmem {
  static constexpr int kPStride = kTileQueries + 4;  // s and p stored transposed, [key][query]
  static constexpr int kKBytes = kKeys * kStride<D> * 2;
  static constexpr int kVBytes = kKeys * D * 2;
  static constexpr int kQBytes = kTileQueries * kStride<D> * 2;
  static constexpr int kPBytes = kKeys * kPStride * 4;
  static constexpr int kStatBytes = (3 + 4) * kTileQueries * 4 + kTileQueries * 4;  // m, l, c, 4 partial maxima, pos
  static constexpr int kBytes = kKBytes + kVBytes + kQBytes + kPBytes + kStatBytes;
};

// Which tile of which piece block `tile` is, counting only the pieces the tiles kernel takes (prefill pieces of at
// least tiled_min_rows rows); false when none.
// Each warp scans the pieces 32 at a time (a prefix sum of their tile counts), so a decode step of many pieces
// costs a few loads per block; every warp of the block finds the same answer.
__device__ bool find_tile(const AttentionParams& p, int tile, int* piece_index, int* first_row, int* rows) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int before = 0;  // tiles of the pieces scanned so far
  for (int base = 0; base < p.step.pieces; base += 32) {
    const int i = base + lane;
    // Decode pieces belong to the decode kernel whatever their size.
    const int piece_rows = i < p.step.pieces && p.step.piece[i].role != DeviceRole::decode ? p.step.piece[i].rows : 0;
    const int tiles = piece_rows >= p.tiled_min_rows ? (piece_rows + p.tile_rows - 1) / p.tile_rows : 0;
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

// Scores of the tile: thread (qg, kg) computes queries 4qg .. 4qg+3 against keys kg + 16j (j < 4), each dot the same
// ascending chain as dot4 gives one query and key; written transposed as s[key][query].
template <int D>
__device__ void tile_scores(const bf16* qs, const bf16* ks, int n, float scale, float* st) {
  constexpr int kPStride = TilesSmem<D>::kPStride;
  const int qg = threadIdx.x >> 4, kg = threadIdx.x & 15;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  const uint2* q2 = reinterpret_cast<const uint2*>(qs + 4 * qg * kStride<D>);
  const uint2* k2 = reinterpret_cast<const uint2*>(ks + kg * kStride<D>);
  constexpr int kRow2 = kStride<D> / 4;  // uint2 per padded row
#pragma unroll 2
  for (int c = 0; c < D / 4; ++c) {
    uint2 qv[4], kv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) qv[i] = q2[i * kRow2 + c];
#pragma unroll
    for (int j = 0; j < 4; ++j) kv[j] = k2[16 * j * kRow2 + c];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = dot4(qv[i], kv[j], acc[i][j]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int t = kg + 16 * j;
    if (t >= n) continue;
    float4 s;
    s.x = __fmul_rn(acc[0][j], scale);
    s.y = __fmul_rn(acc[1][j], scale);
    s.z = __fmul_rn(acc[2][j], scale);
    s.w = __fmul_rn(acc[3][j], scale);
    *reinterpret_cast<float4*>(st + t * kPStride + 4 * qg) = s;
  }
}

// Keys [t_begin, t_end) of the P.V product for the thread's 4 queries (p at st4[t * kPStride + i]) and dims
// 2 dg + 32 k + {0, 1} (V pairs at v2[t * D / 2 + 16 k]). kMasked: keys past a query's own position are skipped,
// so its fma chain is exactly the one the rows kernel runs.
template <int D, bool kMasked>
__device__ __forceinline__ void tile_pv(const float* st4, const uint32_t* v2, int t_begin, int t_end,
                                        const int (&nq4)[4], float (&acc)[4][D / 16]) {
  constexpr int kPStride = TilesSmem<D>::kPStride;
  for (int t = t_begin; t < t_end; ++t) {
    const float4 pt = *reinterpret_cast<const float4*>(st4 + t * kPStride);
    const float pi[4] = {pt.x, pt.y, pt.z, pt.w};
#pragma unroll
    for (int k = 0; k < D / 32; ++k) {
      const uint32_t pair = v2[t * (D / 2) + 16 * k];
      const float v0 = bf16_low(pair), v1 = bf16_high(pair);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (kMasked && t >= nq4[i]) continue;
        acc[i][2 * k] = __fmaf_rn(pi[i], v0, acc[i][2 * k]);
        acc[i][2 * k + 1] = __fmaf_rn(pi[i], v1, acc[i][2 * k + 1]);
      }
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) attention_tiles_kernel(AttentionParams p) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  static_assert(D % 32 == 0, "P.V dims in pairs 32 apart");
  using S = TilesSmem<D>;
  constexpr int kPStride = S::kPStride;
  constexpr int kDims2 = D / 32;  // BF16 pairs of dims per thread in P.V
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = reinterpret_cast<bf16*>(smem + S::kKBytes);
  bf16* qs = reinterpret_cast<bf16*>(smem + S::kKBytes + S::kVBytes);
  float* st = reinterpret_cast<float*>(smem + S::kKBytes + S::kVBytes + S::kQBytes);
  float* m_s = st + kKeys * kPStride;
  float* l_s = m_s + kTileQueries;
  float* c_s = l_s + kTileQueries;
  float* part = c_s + kTileQueries;                                      // [4][64] partial maxima
  int32_t* pos_s = reinterpret_cast<int32_t*>(part + 4 * kTileQueries);  // -1 for an unused query

  int piece_index, first_row, tile_rows;
  if (!find_tile(p, blockIdx.x, &piece_index, &first_row, &tile_rows)) return;
  const DevicePiece piece = p.step.piece[piece_index];
  const int kvh = blockIdx.y, tid = threadIdx.x, G = p.group;

  // Query qi of the tile is head kvh * G + qi % G of row first_row + qi / G.
  for (int qi = tid / (D / 8); qi < kTileQueries; qi += kThreads / (D / 8)) {
    const int r = qi / G;
    const bf16* src = r < tile_rows ? query_ptr(p, first_row + r, kvh * G + qi % G, D) : nullptr;
    load_query<D>(src, qs + qi * kStride<D>, tid % (D / 8), D / 8);
  }
  if (tid < kTileQueries) {
    const int r = tid / G;
    pos_s[tid] = r < tile_rows ? p.step.row_position[first_row + r] : -1;
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  const int32_t last_position = p.step.row_position[first_row + tile_rows - 1];

  const int qg = tid >> 4, dg = tid & 15;  // P.V: queries 4qg .. 4qg+3, dims 2dg + 32k + {0, 1}
  float acc[4][2 * kDims2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 2 * kDims2; ++k) acc[i][k] = 0.0f;
  __syncthreads();

  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;
  for (int block_start = 0; block_start <= last_position; block_start += kKeys) {
    const int n = keys_in_block(last_position, block_start);
    const bf16* key = kv_key(piece, p.step.page_table, p.layer, block_start, kvh, p.kv_heads, D);
    load_kv_tile<D>(key, key + kv_page_elems(p.kv_heads, D), row_stride, n, ks, vs);
    __syncthreads();

    tile_scores<D>(qs, ks, n, p.scale, st);
    __syncthreads();

    // Softmax statistics, query qi = tid % 64 over keys [16 quarter, 16 quarter + 16): partial maxima first.
    const int qi = tid % kTileQueries, quarter = tid / kTileQueries;
    const int nq = keys_in_block(pos_s[qi], block_start);
    float block_max = -INFINITY;
    for (int t = 16 * quarter; t < min(nq, 16 * quarter + 16); ++t) block_max = fmaxf(block_max, st[t * kPStride + qi]);
    part[quarter * kTileQueries + qi] = block_max;
    __syncthreads();
    block_max = fmaxf(fmaxf(part[qi], part[kTileQueries + qi]),
                      fmaxf(part[2 * kTileQueries + qi], part[3 * kTileQueries + qi]));
    const float m_old = m_s[qi];
    const float m_new = fmaxf(m_old, block_max);
    for (int t = 16 * quarter; t < min(nq, 16 * quarter + 16); ++t)
      st[t * kPStride + qi] = softmax_exp(__fsub_rn(st[t * kPStride + qi], m_new));
    // A query with no key in this block keeps its state: c = 1 leaves l and acc exactly as they are.
    const float c = nq > 0 ? softmax_exp(__fsub_rn(m_old, m_new)) : 1.0f;
    if (quarter == 0) c_s[qi] = c;
    __syncthreads();
    if (quarter == 0 && nq > 0) {  // l in key order; nothing else reads l or m before the next block
      float l = __fmul_rn(l_s[qi], c);
      for (int t = 0; t < nq; ++t) l = __fadd_rn(l, st[t * kPStride + qi]);
      l_s[qi] = l;
      m_s[qi] = m_new;
    }

    // P.V: rescale, then keys every one of the thread's queries takes, then the diagonal keys query by query.
    int nq4[4], n_all = kKeys, n_any = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      nq4[i] = keys_in_block(pos_s[4 * qg + i], block_start);
      n_all = min(n_all, nq4[i]);
      n_any = max(n_any, nq4[i]);
      const float ci = c_s[4 * qg + i];
#pragma unroll
      for (int k = 0; k < 2 * kDims2; ++k) acc[i][k] = __fmul_rn(acc[i][k], ci);
    }
    const uint32_t* v2 = reinterpret_cast<const uint32_t*>(vs) + dg;
    tile_pv<D, false>(st + 4 * qg, v2, 0, n_all, nq4, acc);
    tile_pv<D, true>(st + 4 * qg, v2, n_all, n_any, nq4, acc);
    __syncthreads();  // K, V, s/p, l and m are rewritten by the next block
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int qi = 4 * qg + i, r = qi / G;
    if (r >= tile_rows) continue;
    const int row = first_row + r, head = kvh * G + qi % G;
    const bf16* gate = query_ptr(p, row, head, D) + D;
    bf16* out = p.out + (static_cast<int64_t>(row) * p.q_heads + head) * D;
    const float l = l_s[qi];
#pragma unroll
    for (int k = 0; k < kDims2; ++k) {
      const int d = 2 * dg + 32 * k;
      __nv_bfloat162 y;
      y.x = __float2bfloat16(gated_output(acc[i][2 * k], l, __bfloat162float(gate[d])));
      y.y = __float2bfloat16(gated_output(acc[i][2 * k + 1], l, __bfloat162float(gate[d + 1])));
      *reinterpret_cast<__nv_bfloat162*>(out + d) = y;
    }
  }
}

// ---- Launch.

// Whether a prefill kernel may find rows of its own (DeviceStep::decode_rows: when the host did not count, yes).
bool has_prefill_rows(const DeviceStep& step) { return step.decode_rows < 0 || step.decode_rows < step.rows; }

template <typename Kernel>
void allow_smem(Kernel kernel, int bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

template <int D, int kJ>
void launch_rows(const AttentionParams& p, cudaStream_t stream) {
  constexpr int kBytes = RowsSmem<D>::kBytes;
  static const bool configured = (allow_smem(attention_rows_kernel<D, kJ>, kBytes, "attention_rows_kernel smem"), true);
  (void)configured;
  if (has_prefill_rows(p.step)) {
    launch_dependent("attention_rows_kernel", attention_rows_kernel<D, kJ>, dim3(p.step.rows, p.kv_heads), kThreads,
                     kBytes, stream, p);
    check_launch("attention_rows_kernel");
  }
  if (p.step.decode_rows == 0) return;

  // One cluster per row up to kMaxDecodeClusters, so a long prefill step does not launch kCluster idle blocks per
  // row; clusters then take rows kMaxDecodeClusters apart (which cluster serves a row changes none of its bits).
  static const bool decode_configured =
      (allow_smem(attention_decode_kernel<D, kJ>, kBytes, "attention_decode_kernel smem"), true);
  (void)decode_configured;
  const int clusters = std::min(p.step.rows, kMaxDecodeClusters);
  launch_dependent("attention_decode_kernel", attention_decode_kernel<D, kJ>, dim3(clusters * kCluster, p.kv_heads),
                   kThreads, kBytes, stream, p);
  check_launch("attention_decode_kernel");
}

// The rows and decode kernels with the fewest queries per thread in their P.V that cover the group: group * D values
// over 256 threads, rounded up to a power of two (at most kMaxGroup * D / 256).
template <int D, int kJ = 1>
void launch_rows_for_group(const AttentionParams& p, cudaStream_t stream) {
  if constexpr (kJ < kMaxGroup * D / kThreads) {
    if (p.group * D > kJ * kThreads) return launch_rows_for_group<D, 2 * kJ>(p, stream);
  }
  launch_rows<D, kJ>(p, stream);
}

template <int D>
void launch_for_head_dim(const AttentionParams& p, cudaStream_t stream) {
  launch_rows_for_group<D>(p, stream);

  constexpr int kBytes = TilesSmem<D>::kBytes;
  static const bool configured = (allow_smem(attention_tiles_kernel<D>, kBytes, "attention_tiles_kernel smem"), true);
  (void)configured;
  if (!has_prefill_rows(p.step)) return;
  // Tiles are at most rows / tile_rows plus one partial tile per piece the kernel takes, and it takes at most
  // rows / tiled_min_rows pieces.
  const int tiled_pieces = std::min(p.step.pieces, p.step.rows / p.tiled_min_rows);
  const int tiles = (p.step.rows + p.tile_rows - 1) / p.tile_rows + tiled_pieces;
  launch_dependent("attention_tiles_kernel", attention_tiles_kernel<D>, dim3(tiles, p.kv_heads), kThreads, kBytes,
                   stream, p);
  check_launch("attention_tiles_kernel");
}

}  // namespace

void launch_attention(const DeviceStep& step, int32_t attn_layer, const bf16* q_gate, AttentionDims dims, bf16* out,
                      cudaStream_t stream) {
  const int hd = dims.head_dim;
  if (dims.kv_heads <= 0 || dims.q_heads <= 0 || dims.q_heads % dims.kv_heads != 0 ||
      dims.q_heads / dims.kv_heads > kMaxGroup || (hd != 32 && hd != 64 && hd != 128 && hd != 256)) {
    check_cuda(cudaErrorInvalidValue,
               "launch_attention: head_dim must be 32, 64, 128 or 256 and q_heads a multiple of kv_heads, at most "
               "16 per KV head");
  }
  if (step.rows <= 0) return;
  AttentionParams p;
  p.step = step;
  p.layer = attn_layer;
  p.q_gate = q_gate;
  p.out = out;
  p.q_heads = dims.q_heads;
  p.kv_heads = dims.kv_heads;
  p.group = dims.q_heads / dims.kv_heads;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  p.tile_rows = kTileQueries / p.group;
  // A tile shares each K/V block among its rows; below half a tile of rows, one block per row is quicker.
  p.tiled_min_rows = std::max(2, p.tile_rows / 2);
  switch (hd) {
    case 32:
      launch_for_head_dim<32>(p, stream);
      break;
    case 64:
      launch_for_head_dim<64>(p, stream);
      break;
    case 128:
      launch_for_head_dim<128>(p, stream);
      break;
    default:
      launch_for_head_dim<256>(p, stream);
      break;
  }
}

}  // namespace duet::backend::cuda
