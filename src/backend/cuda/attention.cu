// Causal softmax attention over the paged KV cache, with the output gate: decode rows here; prefill rows on tensor
// cores in attention_prefill.cu.
//
// The arithmetic of one query (a row and a query head) in the decode kernel's blocks:
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
// Decode rows (pieces with DeviceRole::decode, whatever their size) take attention_decode_lanes_kernel
// (attention_decode_lanes.cu) when their head shape fits a warp (the 9B's does), else attention_decode_kernel here
// (DUET_ATTN_DECODE=cluster: here always): walking every key in one block leaves a long decode row on kv_heads SMs,
// so a cluster of kDecodeCluster blocks shares the row's key blocks. With P = position / 64 + 1 key blocks, per =
// ceil(P / kDecodeCluster) and A = ceil(P / per), block r of the cluster runs the loop above (from m = -inf, l = 0,
// acc = 0) over key blocks [r per, min((r + 1) per, P)) for r < A (decode_split), and the cluster merges the A
// partial states (m_r, l_r, acc_r) through distributed shared memory, in r order (merge_cluster_states):
//   M = max_r m_r,  c_r = exp(m_r - M)
//   l = l_0 * c_0, then l = fma(l_r, c_r, l) for r = 1 .. A-1;  acc likewise
//   out = bf16((acc / l) * sigmoid(gate))
// The split depends on the row's position alone, the merge order is fixed, and which block of which cluster serves
// a row changes no operation, so a decode row's bits depend only on its sequence and position: not on the other
// rows, their number nor their roles. They may differ in the last bits from the same row computed as a prefill
// row (architecture.md allows it).
//
// Which piece goes where is read on the device (a block whose row belongs to the other kernel skips it); a kernel
// that would find no row at all, by the host's count of decode rows, is not launched.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_shared.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

using namespace attention;  // attention_shared.h

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Q and K rows in shared memory are padded by 4 BF16 (8 bytes): 8-byte loads of 16 consecutive rows then hit
// distinct banks.
template <int D>
constexpr int kStride = D + 4;

// ---- The shared arithmetic.

// One fma step per element of 4 BF16 values held as two 32-bit words, in ascending d.
__device__ __forceinline__ float dot4(uint2 q, uint2 k, float acc) {
  acc = __fmaf_rn(bf16_low(q.x), bf16_low(k.x), acc);
  acc = __fmaf_rn(bf16_high(q.x), bf16_high(k.x), acc);
  acc = __fmaf_rn(bf16_low(q.y), bf16_low(k.y), acc);
  return __fmaf_rn(bf16_high(q.y), bf16_high(k.y), acc);
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

// ---- The rows arithmetic, which each block of a decode cluster runs over its key blocks.

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

// ---- The decode kernel: one cluster of kDecodeCluster blocks per (decode row, KV head).

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
__global__ void __cluster_dims__(kDecodeCluster, 1, 1) __launch_bounds__(kThreads, 2)
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
  const int clusters = gridDim.x / kDecodeCluster;
  const int kvh = blockIdx.y, tid = threadIdx.x, G = p.group;
  constexpr int kQueriesPerPass = kThreads / D;
  const int dim = tid % D, query0 = tid / D;
  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;
  const int64_t value_offset = kv_page_elems(p.kv_heads, D);

  // Every block of a cluster takes the same rows and the same branches around the cluster barriers.
  for (int row = blockIdx.x / kDecodeCluster; row < p.step.rows; row += clusters) {
    const DevicePiece piece = p.step.piece[p.step.row_piece[row]];
    if (piece.role != DeviceRole::decode) continue;
    const int32_t position = p.step.row_position[row];
    const DecodeSplit split = decode_split(position, rank);
    const int first = split.first, last = split.last;

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

    merge_cluster_states<D, kThreads>(p, cluster, rank, split.active, row, kvh, 0, G, m_s, l_s, part);
    cluster.sync();  // no block rewrites (or exits with) its shared memory while another still reads it
  }
}

// ---- Launch.

// The decode kernel with the fewest queries per thread in its P.V that covers the group: group * D values over 256
// threads, rounded up to a power of two (at most kMaxGroup * D / 256).
template <int D, int kJ = 1>
void launch_decode(const AttentionParams& p, cudaStream_t stream) {
  if constexpr (kJ < kMaxGroup * D / kThreads) {
    if (p.group * D > kJ * kThreads) return launch_decode<D, 2 * kJ>(p, stream);
  }
  // One cluster per row up to kMaxDecodeClusters, so a long prefill step does not launch kDecodeCluster idle blocks per
  // row; clusters then take rows kMaxDecodeClusters apart (which cluster serves a row changes none of its bits).
  constexpr int kBytes = RowsSmem<D>::kBytes;
  static const bool configured =
      (allow_smem(attention_decode_kernel<D, kJ>, kBytes, "attention_decode_kernel smem"), true);
  (void)configured;
  const int clusters = std::min(p.step.rows, kMaxDecodeClusters);
  launch_dependent("attention_decode_kernel", attention_decode_kernel<D, kJ>,
                   dim3(clusters * kDecodeCluster, p.kv_heads), kThreads, kBytes, stream, p);
  check_launch("attention_decode_kernel");
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
  launch_prefill(p, hd, stream);
  if (step.decode_rows == 0 || launch_decode_lanes(p, hd, stream)) return;
  switch (hd) {
    case 32:
      return launch_decode<32>(p, stream);
    case 64:
      return launch_decode<64>(p, stream);
    case 128:
      return launch_decode<128>(p, stream);
    default:
      return launch_decode<256>(p, stream);
  }
}

}  // namespace duet::backend::cuda
