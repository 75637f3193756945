// Decode rows' attention with the key rows read straight from the KV pages into the lanes of a warp: the form for
// head shapes whose queries of one KV head fit a warp's registers (group x head_dim <= 1024 with the group rounded up
// to a power of two at most 8, so the 9B's 4 x 256). The cluster form (attention.cu) stages every key block in
// shared memory and walks it in three barrier-separated phases with a quarter of the SM's warps resident: a 64-row
// step's decode attention ran at about a third of the copy rate, most warps waiting at those barriers (ncu, 31st
// round). Here each warp streams its own keys with no barrier until the merge.
//
// The arithmetic of one query (a row and a query head; D = head_dim, lane l holds dims E l .. E l + E - 1, E = D / 32):
//   the row's keys are split over the cluster's blocks as in attention.cu (P = position / 64 + 1 key blocks, per =
//   ceil(P / 8), block r takes key blocks [r per, min((r + 1) per, P))); inside a block, batches of 4 keys
//   (batch b starts at key 64 r per + 4 b) go to warp b % 8. Per warp, from m = -inf, l = 0, acc = 0, per batch:
//     part_t = the lane's dims of q.k_t: one fma chain over its E dims, from 0
//     s_t    = fp32(sum of the 32 parts) * scale    the sum: a fixed tree (pairs of lanes 16 apart, then 8, 4, 2, 1)
//              (-inf for keys after the position)
//     m'     = max(m, max_t s_t),  c = exp(m - m'),  p_t = exp(s_t - m')
//     l      = l * c, then l += p_t for t ascending
//     acc    = acc * c, then acc = fma(p_t, v_t, acc) for t ascending
//   the block merges its 8 warps' (m, l, acc) in warp order, the cluster the blocks' in rank order (as attention.cu):
//     M = max_w m_w, c_w = exp(m_w - M), l = l_0 c_0, then l = fma(l_w, c_w, l) for w = 1 .. 7; acc likewise
//   out = bf16((acc / l) * sigmoid(gate))
// Every step is an explicitly rounded intrinsic and every split depends on the row's position alone, so a decode
// row's bits depend only on its sequence and position: not on the other rows, their number, roles nor order.
//
// DUET_ATTN_LANES_SPLIT=keys splits a row's keys over the cluster's blocks by runs of 32 keys instead of by key
// blocks (keys_split: at 1,100 positions the cluster waits for 5 rounds of its warps instead of 6): still by the
// position alone, with bits of its own.
//
// Which block holds a query changes no value either: a step of few rows (DUET_ATTN_QUERY_SPLIT_ROWS, query_split) may
// give each of a KV head's queries blocks of its own, each block the same keys. Per query the arithmetic above is the
// same: its dots are the same fma chains; the reduce-scatter's tree for any one value pairs lanes 16, 8, 4, 2 then 1
// apart whether a warp sums 16 values or 4 (the halving ends sooner, then the same pairs add whole values); the batch's
// max, p, c, l and acc are per query, and so are both merges.
//
// How a warp's rows arrive changes no value: by default they are copied by cp.async into a ring of 3 batches in shared
// memory, two batches ahead of the one the warp takes (more bytes in flight at the same registers: +0.9% at 64
// streams, +2% on one stream after a 16K prompt, 32nd round); DUET_ATTN_LANES=regs loads each batch's rows into
// registers, the next batch's page looked up meanwhile (the 31st round's form, for A/B).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_shared.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda::attention {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 4;  // keys a warp reads at once (a batch never crosses a 64-key page)

// A lane's E BF16 values of one row, as loaded: E / 2 words (E = 1: one value in a word's high half).
template <int E>
struct LaneRow {
  uint32_t w[E >= 2 ? E / 2 : 1];
};

template <int E>
__device__ __forceinline__ LaneRow<E> load_lane(const bf16* src, bool valid) {
  LaneRow<E> r;
  if constexpr (E == 8) {
    const uint4 x = valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
    r.w[0] = x.x, r.w[1] = x.y, r.w[2] = x.z, r.w[3] = x.w;
  } else if constexpr (E == 4) {
    const uint2 x = valid ? __ldg(reinterpret_cast<const uint2*>(src)) : make_uint2(0, 0);
    r.w[0] = x.x, r.w[1] = x.y;
  } else if constexpr (E == 2) {
    r.w[0] = valid ? __ldg(reinterpret_cast<const uint32_t*>(src)) : 0u;
  } else {
    r.w[0] = valid ? static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(src))) << 16 : 0u;
  }
  return r;
}

template <int E>
__device__ __forceinline__ float lane_value(const LaneRow<E>& r, int e) {
  if constexpr (E == 1) return bf16_high(r.w[0]);
  return e % 2 == 0 ? bf16_low(r.w[e / 2]) : bf16_high(r.w[e / 2]);
}

// Sums each of the N values over the warp's 32 lanes, leaving value (lane >> (5 - log2 N)) in every lane: at the
// lanes 16 apart each lane keeps half of its values and adds its partner's copy of that half, then 8 apart, and so
// on; once one value is left, partners add theirs. a + b equals b + a bit for bit, so every value's sum is the same
// tree, whichever lane ends with it.
template <int N>
__device__ __forceinline__ float reduce_scatter(float (&v)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32 values");
  int count = N;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (count > 1) {
      const int half = count / 2;
      const bool upper = (lane & offset) != 0;
#pragma unroll
      for (int j = 0; j < N / 2; ++j) {
        if (j >= half) break;
        const float keep = upper ? v[half + j] : v[j];
        const float send = upper ? v[j] : v[half + j];
        v[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, offset));
      }
      count = half;
    } else {
      v[0] = __fadd_rn(v[0], __shfl_xor_sync(0xffffffffu, v[0], offset));
    }
  }
  return v[0];
}

constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

// Where lane `lane`'s dim e of query g lives in LanesSmem::q: [g][e / 4][lane][e % 4] when E is a multiple of 4
// (float4 loads, 8 lanes' 128 bytes a phase), else [g][e][lane].
template <int E>
__device__ __forceinline__ int q_word(int g, int lane, int e) {
  if constexpr (E % 4 == 0) return ((g * (E / 4) + e / 4) * 32 + lane) * 4 + e % 4;
  return (g * E + e) * 32 + lane;
}

template <int E>
__device__ __forceinline__ void load_query_lane(const float* q_words, int g, int lane, float (&q)[E]) {
  if constexpr (E % 4 == 0) {
#pragma unroll
    for (int c = 0; c < E / 4; ++c) {
      const float4 x = *reinterpret_cast<const float4*>(q_words + q_word<E>(g, lane, 4 * c));
      q[4 * c] = x.x, q[4 * c + 1] = x.y, q[4 * c + 2] = x.z, q[4 * c + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) q[e] = q_words[q_word<E>(g, lane, e)];
  }
}

// A warp's running state of its queries over the keys it has taken (m of query `lane >> kShift` only).
template <int D, int GP>
struct WarpState {
  float acc[GP][D / 32], l[GP];
  float m_mine;
};

// One batch of kBatch keys (from `batch_start`; those after `position` count as -inf) into the warp's state: the
// arithmetic of the file's comment. k and v are the lane's dims of the batch's rows.
template <int D, int GP>
__device__ __forceinline__ void take_batch(const float* q_words, const LaneRow<D / 32> (&k)[kBatch],
                                           const LaneRow<D / 32> (&v)[kBatch], int batch_start, int position,
                                           float scale, int lane, WarpState<D, GP>& st) {
  constexpr int E = D / 32, N = kBatch * GP, kShift = 5 - log2_of(N);
  const int my_score = lane >> kShift;
  float(&acc)[GP][E] = st.acc;
  float(&l)[GP] = st.l;
  float& m_mine = st.m_mine;
  float dots[N];
#pragma unroll
  for (int g = 0; g < GP; ++g) {
    float q[E];
    load_query_lane<E>(q_words, g, lane, q);
#pragma unroll
    for (int t = 0; t < kBatch; ++t) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) d = __fmaf_rn(q[e], lane_value<E>(k[t], e), d);
      dots[t * GP + g] = d;
    }
  }
  const float dot = reduce_scatter<N>(dots, lane);
  const bool valid = batch_start + my_score / GP <= position;
  const float s = valid ? __fmul_rn(dot, scale) : -INFINITY;
  // The batch's max of my query: its keys are the lanes 8 and 16 apart.
  float batch_max = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 16));
  batch_max = fmaxf(batch_max, __shfl_xor_sync(0xffffffffu, batch_max, 8));
  const float m_new = fmaxf(m_mine, batch_max);
  const float p_mine = softmax_exp(__fsub_rn(s, m_new));
  const float c_mine = softmax_exp(__fsub_rn(m_mine, m_new));
  m_mine = m_new;
  // Rescale by c, then add the batch's keys in order, each p broadcast from the lane that holds it.
#pragma unroll
  for (int g = 0; g < GP; ++g) {
    const float c = __shfl_sync(0xffffffffu, c_mine, g << kShift);
    l[g] = __fmul_rn(l[g], c);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = __fmul_rn(acc[g][e], c);
  }
#pragma unroll
  for (int t = 0; t < kBatch; ++t) {
    float pk[GP];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
      pk[g] = __shfl_sync(0xffffffffu, p_mine, (t * GP + g) << kShift);
      l[g] = __fadd_rn(l[g], pk[g]);
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float x = lane_value<E>(v[t], e);
#pragma unroll
      for (int g = 0; g < GP; ++g) acc[g][e] = __fmaf_rn(pk[g], x, acc[g][e]);
    }
  }
}

// cp.async of 16 bytes into shared memory, zeros when !valid (nothing is read then); the groups it commits complete
// in order.
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Bytes of one batch's K and V rows in a warp's ring: [K, V][kBatch keys][D] BF16.
template <int D>
constexpr int kBatchBytes = 2 * kBatch* D * 2;

// The keys [start, end) block `rank` of a row's cluster takes, and how many of the cluster's blocks have any.
struct KeyRange {
  int start, end, active;
};
// By key blocks of 64 (decode_split, the cluster form's split): at 1,100 positions 18 blocks as 3 a rank over 6 ranks.
__device__ __forceinline__ KeyRange pages_split(int32_t position, int rank) {
  const DecodeSplit split = decode_split(position, rank);
  return {split.first * kKeys, min(split.last * kKeys, position + 1), split.active};
}
// By runs of kWarps * kBatch = 32 keys (a round of the block's warps): at 1,100 positions 160 keys a rank over 7
// ranks, so the cluster waits for 5 rounds instead of 6. Depends on the position alone.
__device__ __forceinline__ KeyRange keys_split(int32_t position, int rank) {
  constexpr int kRound = kWarps * kBatch;
  const int keys = position + 1;
  const int per = ((keys + kDecodeCluster - 1) / kDecodeCluster + kRound - 1) / kRound * kRound;
  const int start = rank * per;
  return {start, min(start + per, keys), (keys + per - 1) / per};
}

// Shared memory of one block: the queries, each warp's space (its ring of kStages batches while it walks its keys,
// then its partial acc), the merge coefficients, and the block's state that the cluster merge reads (m_s, l_s, part:
// the layout merge_cluster_states expects).
template <int D, int GP, int kStages>
struct LanesSmem {
  static constexpr int kWarpBytes = std::max(GP * D * 4, kStages* kBatchBytes<D>);
  alignas(16) float q[GP * D];
  alignas(16) unsigned char warp_space[kWarps][kWarpBytes];
  float warp_m[kWarps][GP], warp_l[kWarps][GP];
  float coef[GP][kWarps];
  float part[GP * D];
  float m_s[GP], l_s[GP];
  __device__ float* warp_acc(int w) { return reinterpret_cast<float*>(warp_space[w]); }
  __device__ bf16* ring(int w, int stage) { return reinterpret_cast<bf16*>(warp_space[w] + stage * kBatchBytes<D>); }
};

// Starts the copies of the batch at `batch_start` (its first key row at `keys`) into `stage`: D 16-byte chunks, lane
// by lane (chunk c: K or V, key t, 8 dims), keys after `position` as zeros.
template <int D>
__device__ __forceinline__ void fetch_batch(bf16* stage, const bf16* keys, int64_t row_stride, int64_t value_offset,
                                            int batch_start, int position, int lane) {
  constexpr int kRowChunks = D / 8;
#pragma unroll
  for (int c = lane; c < 2 * kBatch * kRowChunks; c += 32) {
    const int row = c / kRowChunks, chunk = c % kRowChunks;  // row: K rows 0 .. kBatch-1, then V rows
    const int t = row % kBatch;
    const bf16* src = keys + t * row_stride + (row >= kBatch ? value_offset : 0) + chunk * 8;
    copy_async16(stage + row * D + chunk * 8, src, batch_start + t <= position);
  }
}

// The lane's dims of the batch's rows in a ring stage.
template <int E>
__device__ __forceinline__ LaneRow<E> stage_lane(const bf16* row, int lane) {
  LaneRow<E> r;
  const bf16* at = row + lane * E;
  if constexpr (E == 8) {
    const uint4 x = *reinterpret_cast<const uint4*>(at);
    r.w[0] = x.x, r.w[1] = x.y, r.w[2] = x.z, r.w[3] = x.w;
  } else if constexpr (E == 4) {
    const uint2 x = *reinterpret_cast<const uint2*>(at);
    r.w[0] = x.x, r.w[1] = x.y;
  } else if constexpr (E == 2) {
    r.w[0] = *reinterpret_cast<const uint32_t*>(at);
  } else {
    r.w[0] = static_cast<uint32_t>(*reinterpret_cast<const unsigned short*>(at)) << 16;
  }
  return r;
}

// kStages 0: each warp loads its batch's rows into registers (the next batch's page looked up meanwhile); kStages
// >= 2: into a ring of kStages batches in shared memory by cp.async, kStages - 1 batches ahead of the one it takes
// (the same values in the same order: the same bits).
// kEarly (DUET_CUDA_EARLY_LOADS=1, dependent_launch.h; the ring only): a block's first row asks for the ring's first
// batches before the dependent-launch wait, in attention prep's time, where every key of the batch is at an earlier
// position than the row's (written by earlier steps; prep writes only the row's own key and value, and the step's
// arrays came with its upload, before its first kernel). The query, the row's own key and every write wait.
template <int D, int GP, int kStages, bool kEarly = false>
__global__ void __cluster_dims__(kDecodeCluster, 1, 1) __launch_bounds__(kThreads, 2)
    attention_decode_lanes_kernel(AttentionParams p) {
  static_assert(!kEarly || kStages >= 2, "early loads go into the ring");
  if constexpr (!kEarly) {
    wait_for_prerequisites();  // dependent_launch.h
    let_dependents_launch();
  }
  bool waited = !kEarly;
  constexpr int E = D / 32;
  constexpr int N = kBatch * GP;          // scores of a batch: key-major (value k GP + g)
  constexpr int kShift = 5 - log2_of(N);  // lane l ends with score l >> kShift
  static_assert(D % 32 == 0 && GP * E <= 32 && N <= 32, "a warp holds the group's queries");
  static_assert(kStages == 0 || kStages >= 2, "no ring, or one of at least two batches");
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<LanesSmem<D, GP, kStages>*>(smem_raw);

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int clusters = gridDim.x / kDecodeCluster;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, G = p.group;
  // The KV head, and the block's queries of its group (all GP of them unless split: GP from first_query, GP a block).
  const int kvh = static_cast<int>(blockIdx.y) / p.query_split;
  const int first_query = static_cast<int>(blockIdx.y) % p.query_split * GP, queries = min(GP, G - first_query);
  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;
  const int64_t value_offset = kv_page_elems(p.kv_heads, D);
  const int my_score = lane >> kShift, my_g = my_score % GP;
  constexpr int kStep = kWarps * kBatch;  // keys from one of a warp's batches to its next

  for (int row = blockIdx.x / kDecodeCluster; row < p.step.rows; row += clusters) {
    const DevicePiece piece = p.step.piece[p.step.row_piece[row]];
    if (piece.role != DeviceRole::decode) continue;
    const int32_t position = p.step.row_position[row];
    const KeyRange range = p.lanes_key_split ? keys_split(position, rank) : pages_split(position, rank);
    int early = 0;  // kEarly: the ring's stages filled before the wait (the block's first row only)
    if constexpr (kEarly) {
      if (!waited) {
        for (int key = range.start + warp * kBatch;
             early < kStages - 1 && key < range.end && key + kBatch - 1 < position; key += kStep, ++early) {
          fetch_batch<D>(sm.ring(warp, early), kv_key(piece, p.step.page_table, p.layer, key, kvh, p.kv_heads, D),
                         row_stride, value_offset, key, position, lane);
          commit_copies();
        }
        wait_for_prerequisites();
        let_dependents_launch();
        waited = true;
      }
    }

    if (range.start < range.end) {
      // The block's queries as floats (zeros past them), laid out so that lane l's dims of query g are words
      // q_words(g, l, e): a warp's loads of one e are 32 consecutive words, or 32 consecutive float4 for e in fours.
      for (int i = tid; i < GP * D; i += kThreads) {
        const int g = i / D, dim = i % D;
        sm.q[q_word<E>(g, dim / E, dim % E)] =
            g < queries ? __bfloat162float(query_ptr(p, row, kvh * G + first_query + g, D)[dim]) : 0.0f;
      }
      __syncthreads();
      WarpState<D, GP> st;
#pragma unroll
      for (int g = 0; g < GP; ++g) {
        st.l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) st.acc[g][e] = 0.0f;
      }
      st.m_mine = -INFINITY;  // every lane of the same query holds the same

      const int start = range.start, end = range.end;
      auto batch_keys = [&](int key) { return kv_key(piece, p.step.page_table, p.layer, key, kvh, p.kv_heads, D); };
      const int first_batch = start + warp * kBatch;
      if constexpr (kStages == 0) {
        const bf16* base = first_batch < end ? batch_keys(first_batch) + lane * E : nullptr;
        for (int batch_start = first_batch; batch_start < end; batch_start += kStep) {
          LaneRow<E> k[kBatch], v[kBatch];
#pragma unroll
          for (int t = 0; t < kBatch; ++t) {
            const bool valid = batch_start + t <= position;
            k[t] = load_lane<E>(base + t * row_stride, valid);
            v[t] = load_lane<E>(base + t * row_stride + value_offset, valid);
          }
          // The next batch's page, looked up while this batch's keys are on their way.
          if (batch_start + kStep < end) base = batch_keys(batch_start + kStep) + lane * E;
          take_batch<D, GP>(sm.q, k, v, batch_start, position, p.scale, lane, st);
        }
      } else {
        // The ring: batch j of this warp goes to stage j % kStages; `issue` is the next batch to copy, `keys` its
        // first key row (its page looked up a batch ahead of its copy).
        int issue = first_batch + early * kStep;
        const bf16* keys = issue < end ? batch_keys(issue) : nullptr;
        auto issue_next = [&](int stage) {
          if (issue < end) {
            fetch_batch<D>(sm.ring(warp, stage), keys, row_stride, value_offset, issue, position, lane);
            issue += kStep;
            keys = issue < end ? batch_keys(issue) : nullptr;
          }
          commit_copies();  // an empty group past the last batch keeps the count of groups per batch
        };
#pragma unroll
        for (int stage = 0; stage < kStages - 1; ++stage)
          if (stage >= early) issue_next(stage);
        int stage = 0;
        for (int batch_start = first_batch; batch_start < end; batch_start += kStep) {
          issue_next((stage + kStages - 1) % kStages);  // the stage taken last time round
          wait_copies<kStages - 1>();                   // this batch's copies are done
          __syncwarp();
          const bf16* ring = sm.ring(warp, stage);
          LaneRow<E> k[kBatch], v[kBatch];
#pragma unroll
          for (int t = 0; t < kBatch; ++t) {
            k[t] = stage_lane<E>(ring + t * D, lane);
            v[t] = stage_lane<E>(ring + (kBatch + t) * D, lane);
          }
          take_batch<D, GP>(sm.q, k, v, batch_start, position, p.scale, lane, st);
          __syncwarp();  // every lane has read the stage before it is refilled
          stage = stage + 1 == kStages ? 0 : stage + 1;
        }
        wait_copies<0>();  // nothing in flight into the space the warp's acc takes next
        __syncwarp();
      }

      // This warp's partial state (a warp without keys leaves m = -inf, l = 0, acc = 0: its weight below is 0).
      if ((lane & ((1 << kShift) - 1)) == 0 && my_score < GP) sm.warp_m[warp][my_g] = st.m_mine;
      float* warp_acc = sm.warp_acc(warp);
#pragma unroll
      for (int g = 0; g < GP; ++g) {
        if (lane == 0) sm.warp_l[warp][g] = st.l[g];
#pragma unroll
        for (int e = 0; e < E; ++e) warp_acc[g * D + lane * E + e] = st.acc[g][e];
      }
      __syncthreads();
      if (tid < queries) {
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.warp_m[w][tid]);
        float l_block = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float c = softmax_exp(__fsub_rn(sm.warp_m[w][tid], m));
          sm.coef[tid][w] = c;
          l_block = w == 0 ? __fmul_rn(sm.warp_l[w][tid], c) : __fmaf_rn(sm.warp_l[w][tid], c, l_block);
        }
        sm.m_s[tid] = m;
        sm.l_s[tid] = l_block;
      }
      __syncthreads();
      for (int i = tid; i < queries * D; i += kThreads) {
        const int g = i / D;
        float a = __fmul_rn(sm.warp_acc(0)[i], sm.coef[g][0]);
#pragma unroll
        for (int w = 1; w < kWarps; ++w) a = __fmaf_rn(sm.warp_acc(w)[i], sm.coef[g][w], a);
        sm.part[i] = a;
      }
    }
    cluster.sync();  // every partial state written and visible to the cluster
    merge_cluster_states<D, kThreads>(p, cluster, rank, range.active, row, kvh, first_query, queries, sm.m_s, sm.l_s,
                                      sm.part);
    cluster.sync();  // no block rewrites (or exits with) its shared memory while another still reads it
  }
}

template <int D, int GP, int kStages, bool kEarly = false>
void launch_lanes_staged(const AttentionParams& p, cudaStream_t stream) {
  constexpr int kBytes = sizeof(LanesSmem<D, GP, kStages>);
  constexpr auto kernel = attention_decode_lanes_kernel<D, GP, kStages, kEarly>;
  static const bool configured = (allow_smem(kernel, kBytes, "attention_decode_lanes_kernel smem"), true);
  (void)configured;
  const int clusters = std::min(p.step.rows, kMaxDecodeClusters);
  launch_dependent("attention_decode_lanes_kernel", kernel, dim3(clusters * kDecodeCluster, p.kv_heads * p.query_split),
                   kThreads, kBytes, stream, p);
  check_launch("attention_decode_lanes_kernel");
}

// DUET_ATTN_LANES_SPLIT=keys: the lanes form splits a row's keys over the cluster by runs of 32 keys (read once).
bool lanes_split_by_keys() {
  static const bool on = [] {
    const char* v = std::getenv("DUET_ATTN_LANES_SPLIT");
    return v != nullptr && std::strcmp(v, "keys") == 0;
  }();
  return on;
}

// The warps' rows through a ring of 3 batches by cp.async unless DUET_ATTN_LANES=regs (the same bits; read once).
bool lanes_async() {
  static const bool on = [] {
    const char* v = std::getenv("DUET_ATTN_LANES");
    return v == nullptr || std::strcmp(v, "regs") != 0;
  }();
  return on;
}

// Steps of up to this many rows split each KV head's queries over blocks of one query (query_split): DUET_ATTN_QUERY_
// SPLIT_ROWS=N (read once; 0, the default: never), a measurement switch until timed, or the tests' setting. Why: at
// few rows the form runs a cluster of 8 blocks a (row, KV head), 32 blocks for the 9B's one row on 132 SMs, and each
// warp's batch is 16 dots (4 keys x 4 queries) of fma chains, shuffles and exps: one stream after a 16K prompt (32nd
// round, H100: 144 tok/s where 1K prompts gave 158) read the 15K more keys at about 0.8 TB/s, under a third of the
// copy rate, and about 540 instructions a warp a batch on 32 SMs would take about that long: the estimate this switch
// is here to test. Split, 4 times the blocks take a quarter of the arithmetic each and read the same keys (the other
// three blocks' reads of them mostly from L2).
std::atomic<int32_t> query_split_rows_for_tests{-1};
int32_t query_split_rows() {
  static const int32_t from_environment = [] {
    const char* v = std::getenv("DUET_ATTN_QUERY_SPLIT_ROWS");
    return v != nullptr ? std::max(0, std::atoi(v)) : 0;
  }();
  const int32_t for_tests = query_split_rows_for_tests.load();
  return for_tests >= 0 ? for_tests : from_environment;
}

template <int D, int GP>
void launch_staged_forms(const AttentionParams& p, cudaStream_t stream) {
  if (lanes_async())
    return early_loads() ? launch_lanes_staged<D, GP, 3, true>(p, stream) : launch_lanes_staged<D, GP, 3>(p, stream);
  launch_lanes_staged<D, GP, 0>(p, stream);
}

template <int D, int GP>
void launch_lanes(const AttentionParams& params, cudaStream_t stream) {
  AttentionParams p = params;
  p.lanes_key_split = lanes_split_by_keys() ? 1 : 0;
  if constexpr (GP > 1) {
    if (p.step.rows <= query_split_rows()) {
      p.query_split = GP;  // one query a block: the same arithmetic for each (the file's comment), so the same bits
      return launch_staged_forms<D, 1>(p, stream);
    }
  }
  launch_staged_forms<D, GP>(p, stream);
}

// The group rounded up to a power of two, when the lanes form takes the shape (0 when not).
int lanes_group(int group, int head_dim) {
  int gp = 1;
  while (gp < group) gp *= 2;
  return gp <= 8 && gp * (head_dim / 32) <= 32 ? gp : 0;
}

// DUET_ATTN_DECODE=cluster: every decode row in the cluster form (for measurements and its tests; read once).
bool lanes_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("DUET_ATTN_DECODE");
    return v == nullptr || std::strcmp(v, "cluster") != 0;
  }();
  return on;
}

template <int D>
bool launch_for_group(const AttentionParams& p, int gp, cudaStream_t stream) {
  if constexpr (D / 32 <= 32) {
    switch (gp) {
      case 1:
        launch_lanes<D, 1>(p, stream);
        return true;
      case 2:
        launch_lanes<D, 2>(p, stream);
        return true;
      case 4:
        if constexpr (4 * (D / 32) <= 32) {
          launch_lanes<D, 4>(p, stream);
          return true;
        }
        break;
      case 8:
        if constexpr (8 * (D / 32) <= 32) {
          launch_lanes<D, 8>(p, stream);
          return true;
        }
        break;
      default:
        break;
    }
  }
  return false;
}

}  // namespace

bool launch_decode_lanes(const AttentionParams& p, int head_dim, cudaStream_t stream) {
  const int gp = lanes_group(p.group, head_dim);
  if (gp == 0 || !lanes_allowed()) return false;
  switch (head_dim) {
    case 32:
      return launch_for_group<32>(p, gp, stream);
    case 64:
      return launch_for_group<64>(p, gp, stream);
    case 128:
      return launch_for_group<128>(p, gp, stream);
    case 256:
      return launch_for_group<256>(p, gp, stream);
    default:
      return false;
  }
}

}  // namespace duet::backend::cuda::attention

namespace duet::backend::cuda {

void set_attention_query_split_rows_for_tests(int32_t rows) { attention::query_split_rows_for_tests.store(rows); }

}  // namespace duet::backend::cuda
