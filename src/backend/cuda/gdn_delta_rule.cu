// The gated delta rule of a GDN layer (launch_gdn_delta_rule in kernels.h), in its chunked form, for every row.
//
// The per-token recurrence S_t = e^{g_t} S_{t-1} + k_t d_t^T, d_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t),
// o_t = S_t^T q_t, unrolled over a chunk of 64 positions from the state S_b at its start (G_t = G_{t-1} + g_t from
// G_{-1} = 0, the cumulative log decay):
//   d_t = beta_t (v_t - e^{G_t} S_b^T k_t) - sum_{s<t} A[t][s] d_s,      A[t][s] = (k_t . k_s) e^{G_t - G_s} beta_t
//   o_t = e^{G_t} S_b^T q_t + sum_{s<=t} Q[t][s] d_s,                   Q[t][s] = (q_t . k_s) e^{G_t - G_s}
//   S_b' = e^{G_63} S_b + sum_s (k_s e^{G_63 - G_s}) d_s^T              (when the chunk is complete)
// as transformers' torch_chunk_gated_delta_rule computes it (chunk 64 from position 0). A sequence's state is S_b
// plus the chunk's rows so far (keys, d, G: delta_chunks.h), so a row is computed from exactly the same operands in
// exactly the same order whether its chunk arrives whole, in pieces or a token at a time: in this row-by-row form,
// pieces cut anywhere, and decode rows beside prefill rows, give the same bits. Every sum below runs in an
// order fixed by the row's place in its chunk: dot products over the key index in order, one fma chain; the sum over
// earlier rows split over a fixed number of lanes, then a fixed butterfly; the fold over the 64 rows in order.
//
// The WY form (delta_chunks.h: wy_form_takes, a prefill piece's chunk from its first row): (I + A) d = X with X_t =
// beta_t (v_t - e^{G_t} S_b^T k_t), so d = T X with T = (I + A)^{-1}, which depends on the chunk's keys, beta and G
// alone (transformers' torch_chunk_gated_delta_rule computes the same). T is computed for all chunks at once, and the
// walk's d of a chunk is then a product of every row at once instead of 64 rows one after another (the walk was
// bound by that solve's latency). Other chunks (decode and verify rows, a chunk entered in its middle) keep the
// row-by-row form below, whose bits every decode kernel shares.
//
// Three kernels per layer. chunk_matrices_kernel: one block per (chunk, value head) computes the new rows' G and
// their rows of A and Q (which do not depend on S_b) into the step's chunk scratch, for all chunks at once (a WY
// chunk's T in A's place).
// chunk_state_kernel: one block per (piece, value head, group of up to 32 value columns) walks the piece's chunks in
// order with S_b's columns in shared memory: a column of S, d and o only meets its own column, so the groups are
// independent, but for the keys and G they share in the state: a piece that starts inside one chunk reads that
// chunk's earlier keys and G from the state, and one that ends inside a chunk leaves its new rows' keys and G there,
// in the same rows. chunk_tail_kernel writes those after the walk (stream order), so no group can overwrite what
// another has not read yet. The walk's blocks run 512 threads (the solve takes 256 of them, as the decode
// kernel does), keep each column's d in registers during the solve, and copy the next chunk's inputs in while a chunk
// is computed (bench_gdn_delta: 566 -> 450 us a layer for a 1K prompt, every bit the same). (A head's groups formed one
// cluster instead, synchronised before group 0 wrote: at 179 KB of shared memory a block an SM, only 30 clusters of 4
// fit on an H200 at once, so one prompt's 32 heads ran in two waves and the walk took twice its time.) Pieces of one
// row (decode steps) take one kernel instead, decode_delta_kernel, which computes the row's entries of both with the
// same chains; pieces of a few rows inside one chunk (a verify piece's last token and drafts) take decode_rows_kernel,
// the same chains again a row at a time (DUET_VERIFY_ROWS=chunked sends them through the three kernels instead).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/gdn_gated_norm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mbarrier.h"
#include "backend/cuda/walk_mma.h"

namespace duet::backend::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kC = kDeltaChunk;  // 64 positions
constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kL2Eps = 1e-6f;  // inside the rsqrt of q's and k's sum of squares, as transformers' l2norm

// Where one value head's inputs sit in a row of qkv [q (key_heads * KD) | k (key_heads * KD) | v (value_heads * VD)].
struct HeadInputs {
  int64_t width;  // elements per qkv row
  int32_t q, k, v;
  int32_t head, heads;
  float q_scale;  // key_dim^-0.5
};

template <int KD, int VD>
__device__ __forceinline__ HeadInputs head_inputs(const GdnDims& dims, int32_t head) {
  const int32_t key_head = head / (dims.value_heads / dims.key_heads);
  const int32_t key_width = dims.key_heads * KD;
  return HeadInputs{2 * key_width + dims.value_heads * VD,
                    key_head * KD,
                    key_width + key_head * KD,
                    2 * key_width + head * VD,
                    head,
                    dims.value_heads,
                    static_cast<float>(1.0 / sqrt(static_cast<double>(KD)))};
}

// A head's chunked state within a piece's GDN state for one layer.
template <int KD, int VD>
__device__ __forceinline__ float* head_state(const DevicePiece& piece, int32_t layer, int32_t head) {
  constexpr DeltaHeadState layout{KD, VD};
  return piece.delta + static_cast<int64_t>(layer) * piece.delta_layer_stride + head * layout.elems();
}

// The head's place in a GDN snapshot the piece writes at `position` (DeviceSnapshot), laid out like head_state's; null
// when it writes none there.
template <int KD, int VD>
__device__ __forceinline__ float* snapshot_head_state(const DeviceStep& step, const DevicePiece& piece, int32_t layer,
                                                      int32_t head, int32_t position) {
  constexpr DeltaHeadState layout{KD, VD};
  for (int32_t s = piece.first_snapshot; s < piece.first_snapshot + piece.snapshot_count; ++s)
    if (step.snapshot[s].position == position)
      return step.snapshot[s].delta + static_cast<int64_t>(layer) * piece.delta_layer_stride + head * layout.elems();
  return nullptr;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// One warp l2-normalizes one KD vector of BF16 (times `scale` afterwards, as a separate product like transformers'
// query scaling) into dst. Lane l holds elements l, l + 32, ...; the sum runs in that order then a fixed butterfly.
template <int KD>
__device__ __forceinline__ void l2_normalize_to(const bf16* src, float scale, bool scaled, float* dst) {
  constexpr int kPerLane = (KD + 31) / 32;
  const int lane = threadIdx.x % 32;
  float x[kPerLane];
  float sum_squares = 0.0f;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int i = lane + 32 * e;
    x[e] = i < KD ? __bfloat162float(src[i]) : 0.0f;
    sum_squares = fmaf(x[e], x[e], sum_squares);
  }
  const float inv_norm = rsqrtf(warp_sum(sum_squares) + kL2Eps);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int i = lane + 32 * e;
    if (i < KD) dst[i] = scaled ? (x[e] * inv_norm) * scale : x[e] * inv_norm;
  }
}

// Every row's key and query (vectors 2r and 2r + 1, rows [0, rows)) l2-normalized as l2_normalize_to does, the same
// operations in the same order for each (its bits; the query's times `scale`), from source(r, is_query) into
// dest(r, is_query), a block's warps taking vectors in turn. A warp takes kNormBatch vectors at once: their loads,
// butterflies and stores interleaved, so that it waits for one chain of dependent shuffles a batch instead of one a
// vector (the walk's normalizing was 16% of its cycles, one vector a warp at a time: 48th round's phase clock).
constexpr int kNormBatch = 8;
template <int KD, typename Source, typename Dest>
__device__ __forceinline__ void l2_normalize_rows(int rows, float scale, Source source, Dest dest) {
  constexpr int kPerLane = (KD + 31) / 32;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const int vectors = 2 * rows;
  for (int first = warp; first < vectors; first += kNormBatch * warps) {
    float x[kNormBatch][kPerLane], sum_squares[kNormBatch];
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int vec = min(first + j * warps, vectors - 1);  // a vector past the last: loaded again, never stored
      const bf16* src = source(vec / 2, vec % 2 == 1);
      sum_squares[j] = 0.0f;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int i = lane + 32 * e;
        x[j][e] = i < KD ? __bfloat162float(src[i]) : 0.0f;
        sum_squares[j] = fmaf(x[j][e], x[j][e], sum_squares[j]);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
#pragma unroll
      for (int j = 0; j < kNormBatch; ++j) sum_squares[j] += __shfl_xor_sync(kFullMask, sum_squares[j], offset);
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int vec = first + j * warps;
      if (vec >= vectors) break;  // the same for the whole warp
      const bool is_query = vec % 2 == 1;
      const float inv_norm = rsqrtf(sum_squares[j] + kL2Eps);
      float* dst = dest(vec / 2, is_query);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int i = lane + 32 * e;
        if (i < KD) dst[i] = is_query ? (x[j][e] * inv_norm) * scale : x[j][e] * inv_norm;
      }
    }
  }
}

// Global -> shared copies that do not wait: a block issues every copy of a chunk at once and waits once, instead of
// one load's latency per element (cp.async, bypassing registers).
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void copy_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_address(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void wait_async_copies() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// `count` floats from src to dst, 4 bytes at a time (any alignment), by the whole block.
__device__ __forceinline__ void copy_floats_async(float* dst, const float* src, int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) copy_async_4(dst + i, src + i);
}
// `rows` rows of `width` floats into rows of `dst_stride`: a warp a row, a lane a column (no division: the widths
// of A's and Q's rows are known only at run time, and the index arithmetic of a division per copy was a tenth of
// the walk's issue slots).
__device__ __forceinline__ void copy_rows_async(float* dst, int dst_stride, const float* src, int64_t src_stride,
                                                int rows, int width) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int r = threadIdx.x / 32; r < rows; r += warps)
    for (int c = lane; c < width; c += 32) copy_async_4(dst + r * dst_stride + c, src + r * src_stride + c);
}
// The same for rows of at most 64 floats, 16 bytes at a time: `width` and both strides multiples of 4 floats, both
// bases 16-byte aligned. Half a warp a row, a lane a 16-byte piece (a chunk's rows of A and Q in the walk: a quarter
// of the copies, and of their index arithmetic, of copy_rows_async's).
__device__ __forceinline__ void copy_short_rows_async_16(float* dst, int dst_stride, const float* src,
                                                         int64_t src_stride, int rows, int width) {
  const int half = threadIdx.x % 32 / 16, piece = threadIdx.x % 16, warps = blockDim.x / 32;
  for (int r = 2 * static_cast<int>(threadIdx.x / 32) + half; r < rows; r += 2 * warps)
    if (4 * piece < width) copy_async_16(dst + r * dst_stride + 4 * piece, src + r * src_stride + 4 * piece);
}
// The same, 16 bytes at a time: `kWidth` a multiple of 4, both strides multiples of 4 floats, both bases 16-byte
// aligned.
template <int kWidth>
__device__ __forceinline__ void copy_rows_async_16(float* dst, int dst_stride, const float* src, int64_t src_stride,
                                                   int rows) {
  static_assert(kWidth % 4 == 0, "whole 16-byte pieces");
  constexpr int kPieces = kWidth / 4;
  for (int idx = threadIdx.x; idx < rows * kPieces; idx += blockDim.x) {
    const int r = idx / kPieces, c = 4 * (idx % kPieces);
    copy_async_16(dst + r * dst_stride + c, src + r * src_stride + c);
  }
}
// `rows` rows of `width` BF16 (a multiple of 8, 16-byte aligned) from rows `src_stride` apart, 16 bytes at a time.
__device__ __forceinline__ void copy_bf16_rows_async(bf16* dst, const bf16* src, int64_t src_stride, int rows,
                                                     int width) {
  const int chunks = width / 8;
  for (int idx = threadIdx.x; idx < rows * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = idx % chunks;
    copy_async_16(dst + r * width + c * 8, src + r * src_stride + c * 8);
  }
}

// Columns [col0, col0 + VC) of a head's S_b (KD rows of VD floats) into S (rows kStride floats apart), 16 bytes at a
// time.
template <int KD, int VD, int VC, int kStride>
__device__ __forceinline__ void copy_state_columns_async(float (&S)[KD][kStride], const float* state, int col0) {
  for (int idx = threadIdx.x; idx < KD * VC / 4; idx += blockDim.x)
    copy_async_16(&S[idx / (VC / 4)][4 * (idx % (VC / 4))],
                  state + (idx / (VC / 4)) * VD + col0 + 4 * (idx % (VC / 4)));
}

// The new rows' raw q and k as BF16, staged for normalization.
template <int KD>
struct RawVectors {
  bf16 q[kC][KD];
  bf16 k[kC][KD];
};

// Issues the copies of the chunk's new rows' raw q and k into raw rows [0, rows).
template <int KD>
__device__ void stage_raw_vectors_async(const bf16* qkv, const HeadInputs& in, const DeviceChunk& chunk,
                                        RawVectors<KD>& raw) {
  const bf16* first = qkv + static_cast<int64_t>(chunk.first_row) * in.width;
  copy_bf16_rows_async(&raw.q[0][0], first + in.q, in.width, chunk.rows, KD);
  copy_bf16_rows_async(&raw.k[0][0], first + in.k, in.width, chunk.rows, KD);
}

// A chunk's vectors in shared memory, indexed by the row's place in the chunk (0..63). Rows kStride floats apart: KD +
// 1 puts the rows one instruction reads in different banks (chunk_matrices_kernel's tiles read 32 rows at one index);
// KD + 4 makes each row 16-byte aligned, for the walk's wide form (chunk_state_kernel, kWide), whose lanes read a
// row's next 16 bytes with 4 distinct rows a warp (2 rows apart: 8 banks apart, no conflict).
template <int KD, int kStride = KD + 1>
struct ChunkVectors {
  static constexpr int kRowStride = kStride;
  alignas(16) float q[kC][kStride];
  alignas(16) float k[kC][kStride];
  float G[kC];
  float beta[kC];
};

// The new rows' q and k, l2-normalized from their staged raw rows (rows [filled, filled + rows) of the chunk): a
// vector a warp at a time, or with kBatched (DUET_DELTA_NORM_BATCH=1, 48th round, prepared, off) kNormBatch at once.
template <int KD, bool kBatched, int kStride>
__device__ void normalize_new_vectors(const RawVectors<KD>& raw, const HeadInputs& in, const DeviceChunk& chunk,
                                      ChunkVectors<KD, kStride>& cv) {
  if constexpr (kBatched) {
    l2_normalize_rows<KD>(
        chunk.rows, in.q_scale, [&](int r, bool is_query) { return is_query ? raw.q[r] : raw.k[r]; },
        [&](int r, bool is_query) { return is_query ? cv.q[chunk.filled + r] : cv.k[chunk.filled + r]; });
  } else {
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int vec = warp; vec < 2 * chunk.rows; vec += warps) {  // even: the row's k, odd: its q
      const int r = vec / 2;
      const bool is_query = vec % 2 == 1;
      const int t = chunk.filled + r;
      l2_normalize_to<KD>(is_query ? raw.q[r] : raw.k[r], in.q_scale, is_query, is_query ? cv.q[t] : cv.k[t]);
    }
  }
}

// ---- chunk_matrices_kernel: G, A and Q of the new rows.

template <int KD>
struct MatricesSmem {
  ChunkVectors<KD, KD + 1> cv;
  union {
    RawVectors<KD> raw;   // the new rows' raw q and k, until normalized
    float L[kC][kC + 1];  // then a WY chunk's A, for its inverse (+ 1: a column's lanes read distinct banks)
  };
};

// A WY chunk's T = (I + A)^{-1} (A strictly lower triangular, rows [0, rows)), unit lower triangular like I + A, from
// L = A in shared memory; its strictly lower part into T_out [rows][rows] (A's place in the scratch). Forward
// substitution, kInverseLanes lanes of one warp per column c: T[t][c] = -sum_{c<=s<t} A[t][s] T[s][c] for t > c,
// rows t in order; lane p keeps the column's entries of rows p, p + kInverseLanes, ... in registers (the loop over t
// unrolled, so their indices are constants), its fma chain over them then a fixed butterfly gives the row's entry.
constexpr int kInverseLanes = kThreads / kC;  // 4

__device__ __forceinline__ void invert_unit_lower(const float (*L)[kC + 1], int rows, float* T_out) {
  constexpr int kMine = kC / kInverseLanes;
  const int c = threadIdx.x / kInverseLanes, p = threadIdx.x % kInverseLanes;
  float mine[kMine];  // T[p + kInverseLanes m][c]
#pragma unroll
  for (int m = 0; m < kMine; ++m) mine[m] = p + kInverseLanes * m == c ? 1.0f : 0.0f;
#pragma unroll
  for (int t = 1; t < kC; ++t) {
    if (t >= rows) break;  // the same for the whole block
    float part = 0.0f;
#pragma unroll
    for (int m = 0; m < kMine; ++m)
      if (p + kInverseLanes * m < t) part = fmaf(L[t][p + kInverseLanes * m], mine[m], part);
#pragma unroll
    for (int offset = kInverseLanes / 2; offset > 0; offset >>= 1) part += __shfl_xor_sync(kFullMask, part, offset);
    if (t > c && p == t % kInverseLanes) mine[t / kInverseLanes] = -part;
  }
#pragma unroll
  for (int m = 0; m < kMine; ++m) {
    const int t = p + kInverseLanes * m;
    if (t > c && t < rows) T_out[t * rows + c] = mine[m];
  }
}

// (A WY chunk's K K^T and Q K^T on the tensor cores, three TF32 passes, were about 1% slower in the model and changed
// a prompt's bits: 48th round, removed.)
template <int KD, int VD, bool kNormBatch = false>
__global__ void __launch_bounds__(kThreads)
    chunk_matrices_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, const float* g,
                          GdnDims dims, float* scratch, bool wy_allowed) {
  constexpr DeltaHeadState layout{KD, VD};
  extern __shared__ float4 smem_raw[];
  using Smem = MatricesSmem<KD>;
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  auto& cv = sm.cv;
  constexpr int kVecStride = decltype(Smem::cv)::kRowStride;
  RawVectors<KD>& raw = sm.raw;
  const DeviceChunk chunk = step.chunk[step.chunk_order[blockIdx.x]];
  const int32_t head = blockIdx.y;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  const DevicePiece& piece = step.piece[chunk.piece];
  const float* state = head_state<KD, VD>(piece, layer, head);
  const int a = chunk.filled, b = chunk.filled + chunk.rows;
  const bool wy = wy_allowed && wy_form_takes(piece, chunk);  // then a == 0 and A's place gets T

  stage_raw_vectors_async<KD>(qkv, in, chunk, raw);
  copy_rows_async(&cv.k[0][0], kVecStride, state + layout.keys(), KD, a, KD);  // the earlier rows' keys
  copy_floats_async(cv.G, state + layout.G(), a);                              // and their G
  for (int r = threadIdx.x; r < chunk.rows; r += blockDim.x) {                 // the new rows' g and beta
    const int64_t at = static_cast<int64_t>(chunk.first_row + r) * in.heads + head;
    copy_async_4(&cv.G[a + r], g + at);
    copy_async_4(&cv.beta[a + r], beta + at);
  }
  wait_async_copies();
  __syncthreads();
  normalize_new_vectors<KD, kNormBatch>(raw, in, chunk, cv);
  float* out = scratch + chunk.scratch * dims.value_heads +
               static_cast<int64_t>(head) * chunk_scratch_elems(chunk.filled, chunk.rows);
  float* A = out;                     // [rows][b]
  float* Q = A + chunk.rows * b;      // [rows][b]
  float* G_out = Q + chunk.rows * b;  // [rows]
  if (threadIdx.x == 0) {             // G_t = G_{t-1} + g_t in order: the same sums whatever the chunk's pieces
    float G = a > 0 ? cv.G[a - 1] : 0.0f;
    for (int t = a; t < b; ++t) {
      G = G + cv.G[t];
      cv.G[t] = G;
      G_out[t - a] = G;
    }
  }
  __syncthreads();

  // The entries of (t, s), s <= t, from the products kk = k_t . k_s and qk = q_t . k_s: A (s < t) and Q.
  auto store_entries = [&](int t, int s, float kk, float qk) {
    if (t < a || t >= b || s > t) return;
    const float decay = expf(cv.G[t] - cv.G[s]);
    if (s < t) {
      const float entry = (kk * decay) * cv.beta[t];
      if (wy) {
        sm.L[t][s] = entry;
      } else {
        A[(t - a) * b + s] = entry;
      }
    }
    Q[(t - a) * b + s] = qk * decay;
  };
  // A 4x4 tile of (t, s) per thread over t in [a, b), s <= t. A WY chunk's A goes to shared memory for its inverse.
  const int t0 = 4 * (threadIdx.x / 16), s0 = 4 * (threadIdx.x % 16);
  if (!(t0 + 3 < a || t0 >= b || s0 > t0 + 3)) {
    float kk[4][4] = {}, qk[4][4] = {};
#pragma unroll 4
    for (int i = 0; i < KD; ++i) {
      float kt[4], qt[4], ks[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) kt[x] = cv.k[t0 + x][i], qt[x] = cv.q[t0 + x][i], ks[x] = cv.k[s0 + x][i];
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          kk[x][y] = fmaf(kt[x], ks[y], kk[x][y]);
          qk[x][y] = fmaf(qt[x], ks[y], qk[x][y]);
        }
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) store_entries(t0 + x, s0 + y, kk[x][y], qk[x][y]);
  }
  if (!wy) return;
  __syncthreads();  // the whole of A is in L
  invert_unit_lower(sm.L, b, A);
}

// ---- chunk_state_kernel: d, the outputs and the state, chunk after chunk (pieces of more than one row).

// Where a walk block's time goes (bench_gdn_delta with DUET_WALK_CLOCK=1): when walk_phase_clock is set
// (set_walk_phase_clock_for_tests), thread 0 of block (0, 0, 0) reads the SM's clock at the walk's phase boundaries and
// adds each phase's cycles into walk_phase_clock[phase]: 0 waiting for a chunk's copies, 1 normalizing its vectors
// (with v into u and the decays), 2 issuing the next chunk's copies, 3 S_b^T k and S_b^T q, 4 d, 5 the outputs, the
// fold and the stores (to the next chunk's first barrier, so the block's slowest warp). Null, the default: one
// thread's comparison a launch and nothing read.
__device__ unsigned long long* walk_phase_clock = nullptr;

class PhaseClock {
 public:
  // `sums` null: off (every thread but one block's first: nothing read, two registers).
  __device__ explicit PhaseClock(unsigned long long* sums) : sums_(sums) {
    if (sums_ != nullptr) last_ = clock64();
  }
  // Adds the cycles since the last mark to `phase`'s counter: a reduction the thread does not wait for, so the clock
  // itself costs the phases little.
  __device__ __forceinline__ void mark(int phase) {
    if (sums_ == nullptr) return;
    const long long now = clock64();
    atomicAdd(sums_ + phase, static_cast<unsigned long long>(now - last_));
    last_ = now;
  }
  // Adds one to counter `slot` (the blocks a clock saw).
  __device__ __forceinline__ void count(int slot) {
    if (sums_ != nullptr) atomicAdd(sums_ + slot, 1ull);
  }

 private:
  unsigned long long* sums_;
  long long last_ = 0;
};

// Where a dense decode block's time goes (bench_gdn_delta with DUET_DENSE_CLOCK=1): when dense_phase_clock is set
// (set_dense_phase_clock_for_tests), thread 0 of every decode_dense_kernel block (a column thread) adds its cycles in
// each phase into dense_phase_clock[phase]: 0 until the row's vectors have landed, 1 normalizing them, 2 the chains of
// S_b^T k and S_b^T q, 3 waiting for the A and Q entries (and the earlier rows' d copies), 4 d and the output, 5 the
// stores and the gated norm; thread VD (the A and Q entries of the chunk's first row) adds its entries' cycles into
// [6]; [7] counts the blocks. The sums over all blocks, so the bench prints a block's mean.
__device__ unsigned long long* dense_phase_clock = nullptr;

// A chunk's inputs from the scratch and beta, twice: the next chunk's are copied in while this one is computed. Rows
// kStride floats apart: kC + 1 spreads a column's lanes over the banks (the solve); kC + 4 puts the rows of an m16n8k8
// fragment (8 rows, 4 columns) in distinct banks (walk_mma.h).
template <int kStride = kC + 1>
struct WalkInputs {
  static constexpr int kRowStride = kStride;
  alignas(16) float A[kC][kStride];
  float Q[kC][kStride];
  float G[kC];
  float beta[kC];
};

// kMma: the tensor-core form's strides (walk_mma.h), S_b's and u's rows VC + 8 floats apart, so that a fragment's
// 4 rows of 8 columns fall in distinct banks; the other forms read the same arrays by their rows alone.
template <int KD, int VC, bool kWide = false, bool kMma = false>
struct StateSmem {
  static constexpr int kSStride = kMma ? VC + 8 : VC;
  static constexpr int kU = kMma ? VC + 8 : VC + VC / 8;  // (the padding spreads the solve's banks)
  using Inputs = WalkInputs<kMma ? kC + 4 : kC + 1>;
  ChunkVectors<KD, kWide ? KD + 4 : KD + 1> cv;  // (the walk keeps G and beta in `next`)
  RawVectors<KD> raw;
  bf16 raw_v[kC][VC];
  alignas(16) float S[KD][kSStride];  // (16-byte rows: the wide form reads them 16 bytes at a time)
  alignas(16) float u[kC][kU];        // d of the earlier rows; v then d of the new rows
  float wk[kC][VC];                   // S_b^T k_t
  float wq[kC][VC];                   // S_b^T q_t
  Inputs next[2];                     // chunk i of the piece's walk in next[i % 2]
  float eG[kC];                       // e^{G_t}
  float decay[kC];                    // e^{G_63 - G_t}, for the fold
};

// kBulkInputs (DUET_DELTA_WALK_BULK=1): the walk's StateSmem with a transaction barrier for each slot of `next`.
template <typename Base>
struct BulkStateSmem : Base {
  alignas(8) unsigned long long inputs_full[2];
};

constexpr int columns_for(int value_dim) { return value_dim < 32 ? value_dim : 32; }
constexpr int lanes_for(int value_dim) { return kThreads / columns_for(value_dim); }
// The walk runs twice as many threads: its tiled phases (S_b^T k and q, the fold, the outputs, the normalization) have
// twice the warps to hide their latency, each thread half the elements (a tile of kWalkTileRows x 4); the solve stays
// on kThreads, so its lanes per column, and with them its sums, are those of the decode kernel.
constexpr int kWalkThreads = 2 * kThreads;
constexpr int kWalkTileRows = 4 * kThreads / kWalkThreads;

// d_t of one column from the sum over earlier rows: lane p of kLanes adds rows p, p + kLanes, ... (an fma chain from
// zero), then a fixed butterfly gives every lane of the column the same total (each level adds two lanes' values,
// and a + b = b + a). Both state kernels finish with this, so a row's d has the same bits whichever computed it.
// d_t from the finished sum over earlier rows (one expression, so every kernel contracts it alike).
__device__ __forceinline__ float corrected_from_sum(float sum, float v, float eG, float wk, float beta) {
  return beta * (v - eG * wk) - sum;
}
template <int kLanes>
__device__ __forceinline__ float finish_corrected_value(float part, float v, float eG, float wk, float beta) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) part += __shfl_xor_sync(kFullMask, part, offset);
  return corrected_from_sum(part, v, eG, wk, beta);
}
template <int kLanes>
__device__ __forceinline__ float corrected_value(const float* A_row, const float* u_column, int u_stride, int t,
                                                 float v, float eG, float wk, float beta) {
  const int p = threadIdx.x % kLanes;
  float part = 0.0f;
  for (int s = p; s < t; s += kLanes) part = fmaf(A_row[s], u_column[s * u_stride], part);
  return finish_corrected_value<kLanes>(part, v, eG, wk, beta);
}

// The chunk's d in its row-by-row form (a chunk that is not a WY chunk), rows [a, b) in order, kLanes lanes of one warp
// per column. Lane p keeps the column's d of rows p, p + kLanes, ... (its terms of every later row's sum) in registers,
// so a row's sum needs no shared-memory round trip of the row before: the loop over the chunk's 64 rows is unrolled
// (the register indices are then constants), and the terms a row's sum takes from earlier rows can be added while the
// row before is still in its butterfly; only the last term waits for it. The same terms in the same order as
// corrected_value, so the same bits. u holds the earlier rows' d and the new rows' v; d replaces v.
template <int VC, int kLanes, int kU, class Inputs>
__device__ __forceinline__ void solve_corrected_values(const Inputs& w, const float (*wk)[VC], const float* eG, int a,
                                                       int b, float (*u)[kU]) {
  const int tid = threadIdx.x;
  if (tid >= kLanes * VC) return;
  constexpr int kMine = kC / kLanes;
  const int col = tid / kLanes, p = tid % kLanes;
  float mine[kMine];
#pragma unroll
  for (int m = 0; m < kMine; ++m) mine[m] = p + kLanes * m < a ? u[p + kLanes * m][col] : 0.0f;
#pragma unroll
  for (int t = 0; t < kC; ++t) {
    if (t < a || t >= b) continue;  // the same for the whole block
    float part = 0.0f;
#pragma unroll
    for (int m = 0; m < kMine; ++m)
      if (p + kLanes * m < t) part = fmaf(w.A[t][p + kLanes * m], mine[m], part);
    const float d = finish_corrected_value<kLanes>(part, u[t][col], eG[t], wk[t][col], w.beta[t]);
    if (p == t % kLanes) mine[t / kLanes] = d;
  }
  __syncwarp();  // every lane of the column has read its v_t before d_t takes its place
#pragma unroll
  for (int m = 0; m < kMine; ++m) {
    const int s = p + kLanes * m;
    if (s >= a && s < b) u[s][col] = mine[m];
  }
}

// A WY chunk's X_t = beta_t (v_t - e^{G_t} S_b^T k_t) of row t, column j, from its v in u (one expression, so every
// place that computes it contracts it alike).
__device__ __forceinline__ float wy_right_side(float beta, float v, float eG, float wk) { return beta * (v - eG * wk); }

// A WY chunk's d (rows [0, b), a prefill chunk from its first row): (I + A) d = X with X_t = beta_t (v_t - e^{G_t}
// S_b^T k_t), so d = T X with T = (I + A)^{-1}, which chunk_matrices_kernel left in A's place (strictly lower part; the
// diagonal is 1). Every row at once instead of one after another: X into u (unless kXInU: the walk's split form wrote
// it there with S_b^T k), then a kWalkTileRows x 4 tile of d per thread, d_t = X_t + sum_{s<t} T[t][s] X_s (one fma
// chain, s in order). u holds the new rows' v; d replaces it.
template <int VC, int kU, bool kXInU = false, class Inputs>
__device__ __forceinline__ void wy_corrected_values(const Inputs& w, const float (*wk)[VC], const float* eG, int b,
                                                    float (*u)[kU]) {
  constexpr int kTileCols = VC / 4, kTR = kWalkTileRows;
  const int tid = threadIdx.x;
  if constexpr (!kXInU) {
    for (int idx = tid; idx < b * VC; idx += kWalkThreads) {
      const int t = idx / VC, j = idx % VC;
      u[t][j] = wy_right_side(w.beta[t], u[t][j], eG[t], wk[t][j]);
    }
    __syncthreads();
  }
  const int r0 = kTR * (tid / kTileCols), j0 = 4 * (tid % kTileCols);
  const bool has_tile = r0 < b;
  float acc[kTR][4];
  if (has_tile) {
#pragma unroll
    for (int x = 0; x < kTR; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) acc[x][y] = r0 + x < b ? u[r0 + x][j0 + y] : 0.0f;
    const int last = min(r0 + kTR, b) - 1;  // the tile's last row: its chain is the longest
    for (int s = 0; s < last; ++s) {
      float xs[4];
#pragma unroll
      for (int y = 0; y < 4; ++y) xs[y] = u[s][j0 + y];
#pragma unroll
      for (int x = 0; x < kTR; ++x)
        if (s < r0 + x)
#pragma unroll
          for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(w.A[r0 + x][s], xs[y], acc[x][y]);
    }
  }
  __syncthreads();  // every X is read before any d takes its place
  if (has_tile)
#pragma unroll
    for (int x = 0; x < kTR; ++x)
      if (r0 + x < b)
#pragma unroll
        for (int y = 0; y < 4; ++y) u[r0 + x][j0 + y] = acc[x][y];
}

// The new rows' outputs (rows [a, b) of the chunk), o_t = e^{G_t} wq_t + sum_{s<=t} Q[t][s] d_s, a kWalkTileRows x 4
// tile per thread (the default; DUET_DELTA_WALK_TILES=0 for the other form): each output the same fma chain as the
// one-column-a-lane form (s in order from zero, then e^{G_t} wq_t), so the same bits; a step over s reads two Q entries
// and one 16-byte piece of d for eight fmas, where a lane of the other form read a Q entry and a d for each fma (two
// shared-memory loads an fma, which bound that phase). out_rows: the chunk's row a (its first new row), row t at
// out_rows + (t - a) * out_stride.
template <int VC, int kU, class Inputs>
__device__ __forceinline__ void walk_outputs_in_tiles(const Inputs& w, const float (*u)[kU], const float* eG,
                                                      const float (*wq)[VC], int a, int b, float* out_rows,
                                                      int64_t out_stride) {
  constexpr int kTileCols = VC / 4, kTR = kWalkTileRows;
  const int tid = threadIdx.x;
  const int r0 = kTR * (tid / kTileCols), j0 = 4 * (tid % kTileCols);
  if (r0 >= b || r0 + kTR <= a) return;
  float acc[kTR][4] = {};
  const int last = min(r0 + kTR, b) - 1;  // the tile's last row: its chain is the longest
  for (int s = 0; s <= last; ++s) {
    float ds[4];
#pragma unroll
    for (int y = 0; y < 4; ++y) ds[y] = u[s][j0 + y];
#pragma unroll
    for (int x = 0; x < kTR; ++x)
      if (s <= r0 + x)
#pragma unroll
        for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(w.Q[r0 + x][s], ds[y], acc[x][y]);
  }
#pragma unroll
  for (int x = 0; x < kTR; ++x) {
    const int t = r0 + x;
    if (t >= a && t < b)
#pragma unroll
      for (int y = 0; y < 4; ++y) out_rows[(t - a) * out_stride + j0 + y] = fmaf(eG[t], wq[t][j0 + y], acc[x][y]);
  }
}

// S_b of the next chunk over one tile of kRows x 4 entries of S (rows i0.., columns j0..): S' = e^{G_63} S + sum_s
// (k_s e^{G_63 - G_s}) d_s^T, each entry one fma chain from e^{G_63} S over the chunk's rows s in order; into S and,
// when a snapshot keeps it, into `kept` (the column group's columns from col0 of rows VD floats apart). kRows 4 (the
// split fold) reads a key row's four entries and d's four columns 16 bytes at a time: three loads for 16 fmas where the
// 2-row tile takes three for 8. The same products in the same order either way, so the same bits.
template <int kRows, int VD, int kSStride, int kVecStride, int kU>
__device__ __forceinline__ void fold_tile(float (*S)[kSStride], const float (*k)[kVecStride], const float* decay,
                                          const float (*u)[kU], float keep, int i0, int j0, float* kept, int col0) {
  float acc[kRows][4];
#pragma unroll
  for (int x = 0; x < kRows; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) acc[x][y] = S[i0 + x][j0 + y] * keep;
  for (int s = 0; s < kC; ++s) {
    float kd[kRows], d[4];
    if constexpr (kRows == 4) {
      static_assert(kVecStride % 4 == 0 && kU % 4 == 0, "16-byte rows");
      const float4 k4 = *reinterpret_cast<const float4*>(&k[s][i0]);
      const float4 d4 = *reinterpret_cast<const float4*>(&u[s][j0]);
      const float e = decay[s];
      kd[0] = k4.x * e, kd[1] = k4.y * e, kd[2] = k4.z * e, kd[3] = k4.w * e;
      d[0] = d4.x, d[1] = d4.y, d[2] = d4.z, d[3] = d4.w;
    } else {
#pragma unroll
      for (int x = 0; x < kRows; ++x) kd[x] = k[s][i0 + x] * decay[s];
#pragma unroll
      for (int y = 0; y < 4; ++y) d[y] = u[s][j0 + y];
    }
#pragma unroll
    for (int x = 0; x < kRows; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(kd[x], d[y], acc[x][y]);
  }
#pragma unroll
  for (int x = 0; x < kRows; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) S[i0 + x][j0 + y] = acc[x][y];
  if (kept != nullptr)
#pragma unroll
    for (int x = 0; x < kRows; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) kept[(i0 + x) * VD + col0 + j0 + y] = acc[x][y];
}

// kWide (the default since the 45th round, DUET_DELTA_WALK_WIDE=0 the other form; the same bits): S_b^T k and S_b^T q
// read the vectors and S_b 16 bytes at a time, four steps of the key index at once: two loads of a vector row and four
// of S_b for 32 fmas, where each step read the two vector rows' entries one at a time beside a 16-byte piece of S_b
// (three loads for eight fmas; the phase is bound by shared memory: 30th round). Each sum is the same fma chain, the
// key index in order.
// kSplitFold (DUET_DELTA_WALK_SPLIT=1, with kWide; 45th round, off: 5.8% off the FMA walk, below the tensor-core form;
// the same bits): the fold in 4 x 4 tiles on the block's upper threads (256 at the 9B's shape) while its lower half
// computes the outputs, where every thread took a 2 x 4 tile of the fold after its outputs; and a WY chunk's X written
// into u by the S_b^T k tiles that compute it, where a pass of its own followed them behind a barrier. ncu (45th
// round): the walk's warps wait on shared-memory loads first (short scoreboard 3.0 cycles an instruction), then
// barriers (1.1); the fold read 3 loads for 8 fmas, now 16. kMmaPasses (the default since the 46th round, with kWide;
// DUET_DELTA_WALK_MMA=0 the FMA form): a WY chunk's four products on the tensor cores (walk_mma.h), fp32 products in
// three TF32 passes (1: one pass, TF32's precision, the tests' planted control); its own bits for WY chunks, the other
// chunks' bits unchanged. ncu (46th round, one layer of a 1K prompt, H100): 216 us, warps wait on fixed-latency
// dependencies first (1.50 cycles an issued instruction), then not selected 1.12, selected 1.00, math pipe 0.86,
// barrier 0.73, short scoreboard 0.45 (3.04 in the FMA form).
//
// kBulkInputs (DUET_DELTA_WALK_BULK=1, 48th round, prepared, off; with kMmaPasses; the same bits): a chunk's rows of
// raw q, k and v and of A and Q come by bulk copies (the TMA), a row a copy from the lanes of warp 0, completing a
// barrier of the chunk's slot of `next`, where the block's 512 threads issued about 4,400 16-byte cp.async a chunk
// (9 a thread): issuing them was 11.5% of the walk's cycles (48th round's phase clock, 4K prompt, H100). G, beta, the
// first chunk's rows from the state and rows that are not whole 16-byte pieces stay on cp.async. The same values land
// in the same places, so the same bits.
template <int KD, int VD, bool kWide = false, bool kSplitFold = false, int kMmaPasses = 0, bool kNormBatch = false,
          bool kBulkInputs = false>
__global__ void __launch_bounds__(kWalkThreads)
    chunk_state_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, GdnDims dims,
                       const float* scratch, float* out, bool wy_allowed, bool tiled_outputs) {
  constexpr DeltaHeadState layout{KD, VD};
  constexpr int VC = columns_for(VD);
  constexpr int kTileCols = VC / 4;  // kTR x 4 tiles over VC columns
  constexpr int kTR = kWalkTileRows;
  constexpr int kLanes = lanes_for(VD);  // lanes per column in the solve (8 or 16: within one warp)
  constexpr bool kMma = kMmaPasses > 0;
  constexpr int kPasses = kMma ? kMmaPasses : 1;  // (the tensor-core code is dead without kMma)
  extern __shared__ float4 smem_raw[];
  using BaseSmem = StateSmem<KD, VC, kWide, kMma>;
  using Smem = std::conditional_t<kBulkInputs, BulkStateSmem<BaseSmem>, BaseSmem>;
  using Inputs = typename Smem::Inputs;
  constexpr int kU = Smem::kU;  // u's row stride
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  auto& cv = sm.cv;
  constexpr int kVecStride = decltype(Smem::cv)::kRowStride;
  static_assert(!kSplitFold || kWide, "the split fold reads the wide form's 16-byte key rows");
  // The split fold's threads: the block's last kFoldThreads, above the outputs' tiles (rows of up to kC).
  constexpr int kFoldThreads = (KD / 4) * kTileCols;
  static_assert(!kSplitFold || kFoldThreads <= kWalkThreads - (kC / kTR) * kTileCols, "the fold beside the outputs");
  static_assert(!kMma || (kWide && !kSplitFold), "the tensor-core form reads the wide form's 16-byte key rows");
  static_assert(!kMma || (VC == 32 && KD % 16 == 0 && kWalkThreads == 16 * 32), "walk_mma.h's warp tiles");
  static_assert(!kBulkInputs || (kMma && !kNormBatch), "the bulk inputs: the tensor-core walk's form");

  const DevicePiece& piece = step.piece[step.piece_order[blockIdx.x]];
  const int32_t head = blockIdx.y, col0 = blockIdx.z * VC;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  float* state = head_state<KD, VD>(piece, layer, head);
  const int tid = threadIdx.x;
  PhaseClock clock(tid == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 ? walk_phase_clock : nullptr);
  copy_state_columns_async<KD, VD, VC>(sm.S, state, col0);

  // kBulkInputs: slot s of `next` completes barrier s (phase i / 2 for the piece's chunk i); the vectors by bulk copies
  // where every row is whole 16-byte pieces (the 9B's and the test shapes' are).
  auto inputs_bar = [&](int slot) -> uint32_t {
    if constexpr (kBulkInputs) {
      return smem_address(&sm.inputs_full[slot]);
    } else {
      (void)slot;
      return 0u;
    }
  };
  const bool bulk_vectors = kBulkInputs && reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && in.width % 8 == 0 &&
                            in.q % 8 == 0 && in.k % 8 == 0 && (in.v + col0) % 8 == 0 && KD % 8 == 0 && VC % 8 == 0 &&
                            (smem_address(&sm.raw) | smem_address(&sm.raw_v)) % 16 == 0;
  if constexpr (kBulkInputs) {
    if (tid == 0) {
      mbarrier_init(inputs_bar(0), 1);
      mbarrier_init(inputs_bar(1), 1);
      fence_mbarrier_init();
    }
    __syncthreads();
  }

  // Every copy of a chunk at once: its new rows' q, k and v (into the raw buffers), its G, beta and rows of A and Q
  // (into `w`), and for the piece's first chunk the earlier rows' d, keys (for the fold) and G from the state. The
  // first chunk's are issued here; each next chunk's once the raw buffers are normalized, so they arrive while the
  // chunk before is computed.
  auto issue_copies = [&](const DeviceChunk& chunk, Inputs& w, bool first, int slot) {
    const int a = chunk.filled, b = chunk.filled + chunk.rows;
    const float* A = scratch + chunk.scratch * dims.value_heads +
                     static_cast<int64_t>(head) * chunk_scratch_elems(chunk.filled, chunk.rows);
    const float* Q = A + chunk.rows * b;
    const float* G_new = Q + chunk.rows * b;
    if (!bulk_vectors) {
      stage_raw_vectors_async<KD>(qkv, in, chunk, sm.raw);
      copy_bf16_rows_async(&sm.raw_v[0][0], qkv + static_cast<int64_t>(chunk.first_row) * in.width + in.v + col0,
                           in.width, chunk.rows, VC);
    }
    if (first) {
      copy_rows_async(&sm.u[0][0], kU, state + layout.d() + col0, VD, a, VC);
      if (b == kC) copy_rows_async(&cv.k[0][0], kVecStride, state + layout.keys(), KD, a, KD);
      copy_floats_async(w.G, state + layout.G(), a);
    }
    copy_floats_async(w.G + a, G_new, chunk.rows);
    for (int r = tid; r < chunk.rows; r += kWalkThreads)
      copy_async_4(&w.beta[a + r], beta + static_cast<int64_t>(chunk.first_row + r) * in.heads + head);
    const bool rows_16 = Inputs::kRowStride % 4 == 0 && (a * Inputs::kRowStride) % 4 == 0 && b % 4 == 0 &&
                         (reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(Q)) % 16 == 0;
    const bool bulk_rows = kBulkInputs && rows_16;  // then the rows of A and Q by bulk copies, below
    if (rows_16 && !bulk_rows) {
      copy_short_rows_async_16(&w.A[a][0], Inputs::kRowStride, A, b, chunk.rows, b);
      copy_short_rows_async_16(&w.Q[a][0], Inputs::kRowStride, Q, b, chunk.rows, b);
    } else if (!rows_16) {
      copy_rows_async(&w.A[a][0], Inputs::kRowStride, A, b, chunk.rows, b);
      copy_rows_async(&w.Q[a][0], Inputs::kRowStride, Q, b, chunk.rows, b);
    }
    if (kBulkInputs && tid < 32) {  // warp 0: lane 0 tells the barrier the bytes, then each lane its rows' copies
      const uint32_t bar = inputs_bar(slot);
      if (tid == 0) {
        const int vector_bytes = bulk_vectors ? (2 * KD + VC) * static_cast<int>(sizeof(bf16)) : 0;
        const int row_bytes = bulk_rows ? 2 * b * static_cast<int>(sizeof(float)) : 0;
        mbarrier_expect_bytes(bar, static_cast<uint32_t>(chunk.rows * (vector_bytes + row_bytes)));
      }
      __syncwarp();
      fence_proxy_async_shared();
      for (int r = tid; r < chunk.rows; r += 32) {
        const bf16* row = qkv + static_cast<int64_t>(chunk.first_row + r) * in.width;
        if (bulk_vectors) {
          constexpr auto kKeyBytes = static_cast<uint32_t>(KD * sizeof(bf16));
          constexpr auto kValueBytes = static_cast<uint32_t>(VC * sizeof(bf16));
          bulk_copy(smem_address(&sm.raw.q[r][0]), row + in.q, kKeyBytes, bar);
          bulk_copy(smem_address(&sm.raw.k[r][0]), row + in.k, kKeyBytes, bar);
          bulk_copy(smem_address(&sm.raw_v[r][0]), row + in.v + col0, kValueBytes, bar);
        }
        if (bulk_rows) {
          bulk_copy(smem_address(&w.A[a + r][0]), A + r * b, static_cast<uint32_t>(b * sizeof(float)), bar);
          bulk_copy(smem_address(&w.Q[a + r][0]), Q + r * b, static_cast<uint32_t>(b * sizeof(float)), bar);
        }
      }
    }
  };
  issue_copies(step.chunk[piece.first_chunk], sm.next[0], true, 0);

  const int64_t out_stride = static_cast<int64_t>(dims.value_heads) * VD;
  bool folded = false;  // S_b changes only when a chunk completes
  const int32_t end = piece.first_chunk + piece.chunk_count;
  for (int32_t c = piece.first_chunk; c < end; ++c) {
    const DeviceChunk chunk = step.chunk[c];
    const int a = chunk.filled, b = chunk.filled + chunk.rows;
    const bool completes = b == kC;
    const bool wy = wy_allowed && wy_form_takes(piece, chunk);  // w.A holds T = (I + A)^{-1} then, and a == 0
    Inputs& w = sm.next[(c - piece.first_chunk) % 2];
    const bool mma = kMma && wy;  // this chunk on the tensor cores (walk_mma.h)
    __syncthreads();  // the previous chunk is done with everything but the raw buffers and this chunk's inputs
    clock.mark(5);
    wait_async_copies();
    if constexpr (kBulkInputs) {
      const int i = c - piece.first_chunk;
      mbarrier_wait(inputs_bar(i % 2), static_cast<uint32_t>((i / 2) & 1));
    }
    __syncthreads();
    clock.mark(0);

    normalize_new_vectors<KD, kNormBatch>(sm.raw, in, chunk, cv);
    for (int idx = tid; idx < chunk.rows * VC; idx += kWalkThreads)
      sm.u[a + idx / VC][idx % VC] = __bfloat162float(sm.raw_v[idx / VC][idx % VC]);
    for (int t = tid; t < b; t += kWalkThreads) {
      sm.eG[t] = expf(w.G[t]);
      if (completes) sm.decay[t] = expf(w.G[kC - 1] - w.G[t]);
    }
    __syncthreads();
    // The raw buffers are normalized: the next chunk's copies go out now, into the other inputs (the chunk before
    // this one was done with them at the top of this one).
    clock.mark(1);
    if (c + 1 < end) {
      const int slot = (c + 1 - piece.first_chunk) % 2;
      issue_copies(step.chunk[c + 1], sm.next[slot], false, slot);
    }
    clock.mark(2);

    // wk = S_b^T k_t and wq = S_b^T q_t for the new rows: [k; q] as 128 rows, a kTR x 4 tile per thread. The
    // tensor-core form: warp w a 16-row tile (w / 2: k rows for w < 8, q rows after) of 16 columns (w % 2), a k warp
    // writing X into u, a q warp keeping S_b^T q in registers until its outputs.
    const int warp = tid / 32;
    const MmaLane lane = mma_lane();
    const int mma_t0 = 16 * ((warp / 2) % 4), mma_n0 = 16 * (warp % 2);
    float wq_tile[2][4] = {};
    if (mma) {
      if (mma_t0 < b) {
        const float* vec = warp < 8 ? &cv.k[mma_t0][0] : &cv.q[mma_t0][0];
        rows_times_state<kPasses, KD, kVecStride, Smem::kSStride>(vec, &sm.S[0][0], mma_n0, wq_tile);
        if (warp < 8) {
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int t = mma_t0 + tile_row(lane, e), j = mma_n0 + 8 * n + tile_col(lane, e);
              if (t < b) sm.u[t][j] = wy_right_side(w.beta[t], sm.u[t][j], sm.eG[t], wq_tile[n][e]);
            }
        }
      }
    } else {
      const int r0 = kTR * (tid / kTileCols), j0 = 4 * (tid % kTileCols);
      const int t0 = r0 % kC;
      if (r0 < 2 * kC && t0 + kTR - 1 >= a && t0 < b) {
        const float(*vec)[kVecStride] = r0 < kC ? cv.k : cv.q;
        float acc[kTR][4] = {};
        if constexpr (kWide) {
          static_assert(KD % 4 == 0 && kVecStride % 4 == 0 && VC % 4 == 0, "16-byte rows");
#pragma unroll 2
          for (int i = 0; i < KD; i += 4) {
            float4 x4[kTR], s4[4];
#pragma unroll
            for (int x = 0; x < kTR; ++x) x4[x] = *reinterpret_cast<const float4*>(&vec[t0 + x][i]);
#pragma unroll
            for (int q = 0; q < 4; ++q) s4[q] = *reinterpret_cast<const float4*>(&sm.S[i + q][j0]);
#pragma unroll
            for (int x = 0; x < kTR; ++x) {
              const float xs[4] = {x4[x].x, x4[x].y, x4[x].z, x4[x].w};
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                acc[x][0] = fmaf(xs[q], s4[q].x, acc[x][0]);
                acc[x][1] = fmaf(xs[q], s4[q].y, acc[x][1]);
                acc[x][2] = fmaf(xs[q], s4[q].z, acc[x][2]);
                acc[x][3] = fmaf(xs[q], s4[q].w, acc[x][3]);
              }
            }
          }
        }
#pragma unroll 4
        for (int i = 0; i < (kWide ? 0 : KD); ++i) {
          float x4[kTR], s4[4];
#pragma unroll
          for (int x = 0; x < kTR; ++x) x4[x] = vec[t0 + x][i];
#pragma unroll
          for (int y = 0; y < 4; ++y) s4[y] = sm.S[i][j0 + y];
#pragma unroll
          for (int x = 0; x < kTR; ++x)
#pragma unroll
            for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(x4[x], s4[y], acc[x][y]);
        }
        if (kSplitFold && wy && r0 < kC) {  // X straight into u: the pass over it and its barrier saved
#pragma unroll
          for (int x = 0; x < kTR; ++x)
            if (t0 + x < b)
#pragma unroll
              for (int y = 0; y < 4; ++y)
                sm.u[t0 + x][j0 + y] = wy_right_side(w.beta[t0 + x], sm.u[t0 + x][j0 + y], sm.eG[t0 + x], acc[x][y]);
        } else {
          float(*dst)[VC] = r0 < kC ? sm.wk : sm.wq;
#pragma unroll
          for (int x = 0; x < kTR; ++x)
#pragma unroll
            for (int y = 0; y < 4; ++y) dst[t0 + x][j0 + y] = acc[x][y];
        }
      }
    }
    __syncthreads();
    clock.mark(3);

    if (mma) {  // d = X + T X: warp w the 16-row tile w / 4 of the 8 columns w % 4
      const int t0 = 16 * (warp / 4), n0 = 8 * (warp % 4);
      float d_tile[1][4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = t0 + tile_row(lane, e);
        d_tile[0][e] = t < b ? sm.u[t][n0 + tile_col(lane, e)] : 0.0f;
      }
      if (t0 < b) lower_times<kPasses, false, Inputs::kRowStride, kU>(&w.A[t0][0], t0, &sm.u[0][0], n0, b, d_tile);
      __syncthreads();  // every X is read before any d takes its place
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = t0 + tile_row(lane, e);
        if (t < b) sm.u[t][n0 + tile_col(lane, e)] = d_tile[0][e];
      }
    } else if (wy) {
      wy_corrected_values<VC, kU, kSplitFold>(w, sm.wk, sm.eG, b, sm.u);
    } else {
      solve_corrected_values<VC, kLanes, kU>(w, sm.wk, sm.eG, a, b, sm.u);
    }
    __syncthreads();
    clock.mark(4);

    // The new rows' outputs: o_t = e^{G_t} wq_t + sum_{s<=t} Q[t][s] d_s.
    float* const out_rows =
        out + static_cast<int64_t>(chunk.first_row) * out_stride + static_cast<int64_t>(head) * VD + col0;
    if (mma) {  // the q warps: o = e^G (S_b^T q) + Q d, row by row into the output (a WY chunk starts at row 0)
      if (warp >= 8 && mma_t0 < b) {
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) wq_tile[n][e] *= sm.eG[min(mma_t0 + tile_row(lane, e), kC - 1)];
        lower_times<kPasses, true, Inputs::kRowStride, kU>(&w.Q[mma_t0][0], mma_t0, &sm.u[0][0], mma_n0, b, wq_tile);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int t = mma_t0 + lane.g + 8 * half, j = mma_n0 + 8 * n + 2 * lane.t;
            if (t < b)
              *reinterpret_cast<float2*>(&out_rows[t * out_stride + j]) =
                  make_float2(wq_tile[n][2 * half], wq_tile[n][2 * half + 1]);
          }
      }
    } else if (tiled_outputs) {
      walk_outputs_in_tiles<VC, kU>(w, sm.u, sm.eG, sm.wq, a, b, out_rows, out_stride);
    } else {  // one column per lane
      const int j = tid % VC;
      for (int t = a + tid / VC; t < b; t += kWalkThreads / VC) {
        float acc = 0.0f;
        for (int s = 0; s <= t; ++s) acc = fmaf(w.Q[t][s], sm.u[s][j], acc);
        out_rows[(t - a) * out_stride + j] = fmaf(sm.eG[t], sm.wq[t][j], acc);
      }
    }
    if (completes) {  // S_b of the next chunk, a tile of S per thread (the outputs above do not read S)
      folded = true;
      // A snapshot at this chunk's end (DeviceSnapshot): what a step ending here would leave in the state. That is
      // the S_b just folded (each thread stores its own tile), and the chunk rows (d, keys, G) as the state held them
      // before this step: a step whose last chunk completes writes only S_b (the rows are written by a piece ending
      // inside a chunk, at the walk's end and in chunk_tail_kernel, after this). Extra stores only: no result moves.
      float* const kept =
          piece.snapshot_count == 0
              ? nullptr
              : snapshot_head_state<KD, VD>(step, piece, layer, head,
                                            piece.start_position + (chunk.first_row - piece.first_row) + chunk.rows);
      if (kept != nullptr) {
        for (int idx = tid; idx < kC * VC; idx += kWalkThreads) {
          const int64_t at = layout.d() + static_cast<int64_t>(idx / VC) * VD + col0 + idx % VC;
          kept[at] = state[at];
        }
        if (blockIdx.z == 0) {  // the keys and G are the head's, not a column group's
          for (int idx = tid; idx < kC * KD; idx += kWalkThreads)
            kept[layout.keys() + idx] = state[layout.keys() + idx];
          for (int t = tid; t < kC; t += kWalkThreads) kept[layout.G() + t] = state[layout.G() + t];
        }
      }
      if (mma) {  // the k warps, beside the outputs: warp w the 16 key rows w, w + 8, ... of every column
        for (int m0 = 16 * warp; warp < 8 && m0 < KD; m0 += 16 * 8) {
          float acc[4][4];
          const float keep = sm.eG[kC - 1];
#pragma unroll
          for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[n][e] = sm.S[m0 + tile_row(lane, e)][8 * n + tile_col(lane, e)] * keep;
          fold_products<kPasses, kVecStride, kU>(&cv.k[0][0], m0, sm.decay, &sm.u[0][0], 0, acc);
#pragma unroll
          for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = m0 + tile_row(lane, e), j = 8 * n + tile_col(lane, e);
              sm.S[i][j] = acc[n][e];
              if (kept != nullptr) kept[i * VD + col0 + j] = acc[n][e];
            }
        }
      } else if constexpr (kSplitFold) {
        const int f = tid - (kWalkThreads - kFoldThreads);
        if (f >= 0)
          fold_tile<4, VD>(sm.S, cv.k, sm.decay, sm.u, sm.eG[kC - 1], 4 * (f / kTileCols), 4 * (f % kTileCols), kept,
                           col0);
      } else {
        const int i0 = kTR * (tid / kTileCols), j0 = 4 * (tid % kTileCols);
        if (i0 < KD) fold_tile<kTR, VD>(sm.S, cv.k, sm.decay, sm.u, sm.eG[kC - 1], i0, j0, kept, col0);
      }
    } else {  // the piece ends inside this chunk: its new rows' d join the state (keys and G below)
      for (int idx = tid; idx < chunk.rows * VC; idx += kWalkThreads) {
        const int t = a + idx / VC, j = idx % VC;
        state[layout.d() + t * VD + col0 + j] = sm.u[t][j];
      }
    }
  }
  // The last chunk's keys and G join the state in chunk_tail_kernel, once every group has read the old ones.
  if (folded) {
    __syncthreads();
    for (int idx = tid; idx < KD * VC; idx += kWalkThreads)
      state[(idx / VC) * VD + col0 + idx % VC] = sm.S[idx / VC][idx % VC];
  }
  clock.mark(5);
}

// ---- chunk_tail_kernel: the new rows' keys and G of a piece that ends inside a chunk, into the state.

// One block per (piece of several rows, value head): the keys normalized again from qkv by the function
// chunk_state_kernel used (so the same bits), G from the chunk's scratch, as chunk_state_kernel had them.
template <int KD, int VD>
__global__ void __launch_bounds__(kThreads)
    chunk_tail_kernel(DeviceStep step, int32_t layer, const bf16* qkv, GdnDims dims, const float* scratch) {
  constexpr DeltaHeadState layout{KD, VD};
  const DevicePiece& piece = step.piece[step.piece_order[blockIdx.x]];
  const DeviceChunk last = step.chunk[piece.first_chunk + piece.chunk_count - 1];
  if (last.filled + last.rows >= kC) return;  // the walk folded it into S_b
  const int32_t head = blockIdx.y;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  float* state = head_state<KD, VD>(piece, layer, head);
  const int warp = threadIdx.x / 32, warps = kThreads / 32;
  for (int r = warp; r < last.rows; r += warps) {
    const bf16* raw_k = qkv + static_cast<int64_t>(last.first_row + r) * in.width + in.k;
    l2_normalize_to<KD>(raw_k, in.q_scale, false, state + layout.keys() + (last.filled + r) * KD);
  }
  const float* G_new = scratch + last.scratch * dims.value_heads +
                       static_cast<int64_t>(head) * chunk_scratch_elems(last.filled, last.rows) +
                       2 * last.rows * (last.filled + last.rows);
  for (int r = threadIdx.x; r < last.rows; r += kThreads) state[layout.G() + last.filled + r] = G_new[r];
}

// ---- decode_delta_kernel: the same arithmetic for a piece of one row (a decode step), in one kernel: the row's G and
// its rows of A and Q (chunk_matrices_kernel's entries, each the same fma chain), then d, the output and the state
// (chunk_state_kernel's). A head's VD / VC column groups form one cluster. What a block reads is staged in shared
// memory by one round of asynchronous copies at its start: its columns of S_b and of the chunk's earlier d, G, and
// its share of the chunk's earlier keys: group z holds key rows [z R, (z + 1) R), R = 64 / groups, and computes the
// row's A and Q entries for those rows; the cluster then gathers the whole A and Q rows through distributed shared
// memory. (Each group staged all 64 keys and computed all 64 entries before, and read S_b column by column from global
// memory: 61 KB of shared memory, 3 blocks an SM and eight memory round trips per block made the kernel
// latency-bound, a third of a 64-row step. Now 37 KB and 32 registers: 6 blocks an SM.) A row that completes its chunk
// is stored like any other; fold_chunk_kernel folds the chunk afterwards. Each group stores its outputs into group 0's
// shared memory, where group 0 norms the head while the others leave. (Storing the A and Q entries into every
// group's rows the same way, instead of each group gathering them after the barrier, was measured and taken back:
// 4,920-4,941 tok/s at 64 streams against 4,903-4,948 without it.)

// Row t's entries s of A and Q in the one-row kernels: k_t . k_s and q_t . k_s, each one fma chain over the key index
// in order (chunk_matrices_kernel's tiles take the same chains), read 16 bytes at a time; then the decay e^{G_t - G_s}.
struct RowEntries {
  float A, Q;
};
// Four steps of both chains: the key index's next 16 bytes of k_t (a), q_t (b) and the earlier key (c).
__device__ __forceinline__ void entries_step(float4 a, float4 b, float4 c, float& kk, float& qk) {
  kk = fmaf(a.x, c.x, kk), qk = fmaf(b.x, c.x, qk);
  kk = fmaf(a.y, c.y, kk), qk = fmaf(b.y, c.y, qk);
  kk = fmaf(a.z, c.z, kk), qk = fmaf(b.z, c.z, qk);
  kk = fmaf(a.w, c.w, kk), qk = fmaf(b.w, c.w, qk);
}
__device__ __forceinline__ RowEntries decayed_entries(float kk, float qk, float G_t, float G_s, float beta) {
  const float decay = expf(G_t - G_s);
  return RowEntries{(kk * decay) * beta, qk * decay};
}
template <int KD>
__device__ __forceinline__ RowEntries row_entries(const float* kt, const float* q, const float* key, float G_t,
                                                  float G_s, float beta) {
  const float4* kt4 = reinterpret_cast<const float4*>(kt);
  const float4* q4 = reinterpret_cast<const float4*>(q);
  const float4* key4 = reinterpret_cast<const float4*>(key);
  float kk = 0.0f, qk = 0.0f;
#pragma unroll 4
  for (int i = 0; i < KD / 4; ++i) entries_step(kt4[i], q4[i], key4[i], kk, qk);
  return decayed_entries(kk, qk, G_t, G_s, beta);
}

template <int KD, int VD, int VC = columns_for(VD)>
struct DecodeSmem {
  static constexpr int kGroups = VD / VC;
  static constexpr int kRows = kC / kGroups;  // key rows per group
  static constexpr int kKeyStride = KD + 4;   // 16-byte rows (the 16 threads reading a column meet 2-way at most)
  alignas(16) float S[KD][VC];                // the group's columns of S_b (16-byte copies)
  alignas(16) float k[kRows][kKeyStride];     // the group's earlier key rows
  alignas(16) float kt[KD];                   // this row's key and query, normalized (16-byte reads)
  alignas(16) float q[KD];
  alignas(16) float u[kC][VC + VC / 8];  // the group's columns of the earlier rows' d, then this row's v and d
  float A_part[kRows], Q_part[kRows];    // this row's A and Q entries for the group's key rows
  struct {
    float A_row[kC], Q_row[kC];  // the whole A and Q rows, gathered
  } rows;
  float o_head[VD];  // group 0: the head's outputs, each group's stored there by the group, for the gated norm
  float G[kC];
  float wk[VC], wq[VC];
  union {
    struct {
      bf16 q[KD], k[KD];
    } raw;       // this row's raw query and key, until normalized
    bf16 z[VD];  // then group 0: the head's gate, for the gated norm
  };
  bf16 raw_v[VC];
  float g, beta;
};

// A one-chunk kernel's copies of its group's state (DecodeSmem, RowsSmem): columns [col0, col0 + VC) of S_b and of the
// chunk's `before` earlier rows' d, the group's key rows among them (`own_keys` from `first_key`) and their G.
template <int KD, int VD, int VC, typename Smem>
__device__ __forceinline__ void copy_group_state_async(Smem& sm, const float* state, int col0, int before,
                                                       int first_key, int own_keys) {
  constexpr DeltaHeadState layout{KD, VD};
  constexpr int kU = VC + VC / 8;
  copy_state_columns_async<KD, VD, VC>(sm.S, state, col0);
  if constexpr (kU % 4 == 0) {
    copy_rows_async_16<VC>(&sm.u[0][0], kU, state + layout.d() + col0, VD, before);
  } else {
    copy_rows_async(&sm.u[0][0], kU, state + layout.d() + col0, VD, before, VC);
  }
  copy_rows_async_16<KD>(&sm.k[0][0], Smem::kKeyStride, state + layout.keys() + static_cast<int64_t>(first_key) * KD,
                         KD, own_keys);
  copy_floats_async(sm.G, state + layout.G(), before);
}

// kEarlyState (DUET_CUDA_EARLY_LOADS=1, dependent_launch.h): the sequence's state (the group's columns of S_b, the
// chunk's earlier d, keys and G) asked for before the wait, in the conv kernel's tail: only this layer's delta-rule
// kernels write it, in earlier steps (the fold after this kernel, chunk_tail_kernel for other pieces), and the step's
// arrays came with its upload. The row's vectors, g and beta (the conv kernel's outputs) only after it.
template <int KD, int VD, bool kEarlyState = false>
__global__ void __launch_bounds__(kThreads)
    decode_delta_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, const float* g,
                        GdnDims dims, float* out, GdnNormArrays norm) {
  if constexpr (!kEarlyState) {
    wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
    let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  }
  constexpr DeltaHeadState layout{KD, VD};
  constexpr int VC = columns_for(VD);
  constexpr int kLanes = lanes_for(VD);
  constexpr int kU = VC + VC / 8;
  using Smem = DecodeSmem<KD, VD>;
  constexpr int kRows = Smem::kRows;
  static_assert(kC + VC <= kThreads && 2 * kC <= kThreads && KD % 4 == 0, "the middle phase's thread ranges");
  extern __shared__ float4 smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();

  const DevicePiece& piece = step.piece[step.piece_order[step.multi_pieces + step.few_pieces + blockIdx.x]];
  // A one-row piece is one chunk's row (delta_chunks.h: first_row the piece's, filled its position in the chunk): read
  // from the piece itself, not through its chunk, one dependent global load fewer before the copies can be issued.
  const int32_t first_row = piece.first_row;
  const int32_t head = blockIdx.y, group = blockIdx.z, col0 = group * VC;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  float* state = head_state<KD, VD>(piece, layer, head);
  const int tid = threadIdx.x, t = piece.start_position % kC;
  const int first_key = group * kRows;  // the group's key rows: [first_key, first_key + kRows) of those before t
  const int own_keys = max(0, min(kRows, t - first_key));

  const bf16* row = qkv + static_cast<int64_t>(first_row) * in.width;
  auto copy_state = [&] { copy_group_state_async<KD, VD, VC>(sm, state, col0, t, first_key, own_keys); };
  if constexpr (kEarlyState) {
    copy_state();
    wait_for_prerequisites();
    let_dependents_launch();
  }
  copy_bf16_rows_async(sm.raw.q, row + in.q, 0, 1, KD);
  copy_bf16_rows_async(sm.raw.k, row + in.k, 0, 1, KD);
  copy_bf16_rows_async(sm.raw_v, row + in.v + col0, 0, 1, VC);
  if constexpr (!kEarlyState) copy_state();
  if (tid == 0) {
    const int64_t at = static_cast<int64_t>(first_row) * in.heads + head;
    copy_async_4(&sm.g, g + at);
    copy_async_4(&sm.beta, beta + at);
  }
  wait_async_copies();
  __syncthreads();

  const int warp = tid / 32;
  if (warp == 0) l2_normalize_to<KD>(sm.raw.k, in.q_scale, false, sm.kt);
  if (warp == 1) l2_normalize_to<KD>(sm.raw.q, in.q_scale, true, sm.q);
  for (int j = tid; j < VC; j += kThreads) sm.u[t][j] = __bfloat162float(sm.raw_v[j]);
  if (tid == 0) sm.G[t] = (t > 0 ? sm.G[t - 1] : 0.0f) + sm.g;  // G_t = G_{t-1} + g_t, as chunk_matrices_kernel
  __syncthreads();

  const int64_t head_at = static_cast<int64_t>(first_row) * dims.value_heads * VD + static_cast<int64_t>(head) * VD;
  // The raw vectors are dead: group 0's gate comes in behind the arithmetic, for the gated norm at the end.
  if (norm.out != nullptr && group == 0) copy_bf16_rows_async(sm.z, norm.z + head_at, 0, 1, VD);

  // Three independent parts on three thread ranges. Threads s - first_key for the group's rows s <= t: entry s of
  // the row's A and Q, the fma chain of chunk_matrices_kernel's tiles. Threads kC .. kC + VC - 1: S_b^T k_t and
  // S_b^T q_t of one column each (both chains read each S element once), the fma chain of chunk_state_kernel's tiles.
  // The vectors are read 16 bytes at a time; each chain still takes its fmas one element at a time in increasing order
  // (the 25th round's phase trace: the A and Q chains at three 4-byte shared loads a step set when the cluster's first
  // barrier opens).
  const float4* kt4 = reinterpret_cast<const float4*>(sm.kt);
  const float4* q4 = reinterpret_cast<const float4*>(sm.q);
  if (tid < kRows) {
    const int s = first_key + tid;
    if (s <= t) {
      const RowEntries e = row_entries<KD>(sm.kt, sm.q, s == t ? sm.kt : sm.k[tid], sm.G[t], sm.G[s], sm.beta);
      if (s < t) sm.A_part[tid] = e.A;
      sm.Q_part[tid] = e.Q;
    }
  } else if (tid >= kC && tid < kC + VC) {
    const int j = tid - kC;
    float wk = 0.0f, wq = 0.0f;
#pragma unroll 4
    for (int i = 0; i < KD / 4; ++i) {
      const float4 a = kt4[i], b = q4[i];
      const float s0 = sm.S[4 * i][j], s1 = sm.S[4 * i + 1][j], s2 = sm.S[4 * i + 2][j], s3 = sm.S[4 * i + 3][j];
      wk = fmaf(a.x, s0, wk), wq = fmaf(b.x, s0, wq);
      wk = fmaf(a.y, s1, wk), wq = fmaf(b.y, s1, wq);
      wk = fmaf(a.z, s2, wk), wq = fmaf(b.z, s2, wq);
      wk = fmaf(a.w, s3, wk), wq = fmaf(b.w, s3, wq);
    }
    sm.wk[j] = wk;
    sm.wq[j] = wq;
  }
  cluster.sync();  // every group's A and Q entries are written and visible across the cluster
  for (int s = tid; s <= t; s += kThreads) {
    const int owner = s / kRows, at = s % kRows;
    if (s < t) sm.rows.A_row[s] = cluster.map_shared_rank(sm.A_part, owner)[at];
    sm.rows.Q_row[s] = cluster.map_shared_rank(sm.Q_part, owner)[at];
  }
  __syncthreads();

  const float eG = expf(sm.G[t]);
  const int col = tid / kLanes, p = tid % kLanes;
  const float d = corrected_value<kLanes>(sm.rows.A_row, &sm.u[0][col], kU, t, sm.u[t][col], eG, sm.wk[col], sm.beta);
  __syncwarp();
  if (p == 0) sm.u[t][col] = d;
  __syncthreads();

  if (tid < VC) {
    float acc = 0.0f;
#pragma unroll 4
    for (int s = 0; s <= t; ++s) acc = fmaf(sm.rows.Q_row[s], sm.u[s][tid], acc);
    const float o = fmaf(eG, sm.wq[tid], acc);
    out[head_at + col0 + tid] = o;
    // The head's VD outputs are spread over its column groups: each stores its own into group 0's shared memory
    // (distributed shared memory), where group 0's first warp norms the head as gated_norm_kernel would.
    if (norm.out != nullptr) cluster.map_shared_rank(sm.o_head, 0)[col0 + tid] = o;
  }
  // Every group's outputs are in group 0, and no group reads another's shared memory any more: the other groups need
  // not wait for the norm. (Group 0 gathered them after this barrier before, and every group waited at a third one
  // until it had: three of a cluster's four blocks held their slots through the norm.)
  cluster.sync();
  if (norm.out != nullptr && group == 0) {
    wait_async_copies();  // the gate
    if (warp == 0) gated_norm_head(sm.o_head, sm.z, norm.w, norm.eps, VD, norm.out + head_at);
  }
  // The chunk's store gets the row (its last row too: fold_chunk_kernel reads the chunk from the store).
  if (tid < VC) state[layout.d() + t * VD + col0 + tid] = sm.u[t][tid];
  if (group == 0) {
    for (int i = tid; i < KD; i += kThreads) state[layout.keys() + t * KD + i] = sm.kt[i];
    if (tid == 0) state[layout.G() + t] = sm.G[t];
  }
}

// ---- decode_dense_kernel (DUET_DELTA_DECODE=dense): decode_delta_kernel's arithmetic, one block of VD + 64 threads
// a (row, value head) instead of a cluster of VD / 32 blocks of 256. The cluster form stages its columns of S_b
// (64 KB a head) in shared memory, so an SM holds 1.25 heads and most of a block's threads wait at barriers while 48
// of them run the chains that matter (docs/benchmarks.md, 32nd round, "where its time goes"). Here S_b is streamed
// from global memory into registers, a batch of rows at a time, by the thread that owns the column, and an SM holds
// five heads (64 registers a thread), so the kernel is bound by the bytes rather than by the chains. Every value is the
// same fma chain as decode_delta_kernel's, in the same order: a column's S_b^T k and S_b^T q (threads 0 .. VD - 1), the
// row's A and Q entries (threads VD ..), the sum over earlier rows as its 8 lanes' chains and the butterfly of
// finish_corrected_value added in one thread (a + b = b + a, so the order the lanes meet in is the same sum), the
// output's chain and the gated norm's. A row that completes its chunk is stored like any other (fold_chunk_kernel folds
// the chunk after).

constexpr int kDenseBatch = 16;  // rows of S_b a column thread has in flight
constexpr int kDenseLanes = 8;   // the lanes of finish_corrected_value's sum, in the decode kernels' blocks
static_assert(lanes_for(128) == kDenseLanes && lanes_for(32) == kDenseLanes, "the dense kernel adds 8 lanes' chains");
// kRoll == kDenseBulk (decode_dense_kernel): S_b and the earlier rows' d reach the column threads through a ring of
// bulk copies in u's room, kRingRows rows a stage (8 KB at the 9B's heads), kRingStages stages.
constexpr int kDenseBulk = kDeltaDenseBulk;
constexpr int kDenseKeys = kDeltaDenseKeys;
constexpr int kDenseKeysVectorsFirst = kDeltaDenseKeysVectorsFirst;
constexpr int kRingRows = 16;
constexpr int kRingStages = kC / kRingRows;
static_assert(kRingRows % kDenseLanes == 0, "a stage's first row is a multiple of the lanes: row r adds to lane r % 8");

template <int KD, int VD>
struct DenseSmem {
  static constexpr int kThreads = VD + kC;  // a thread a column, a thread an entry of A and Q
  alignas(16) float u[kC][VD];              // the chunk's earlier rows' d (kDenseBulk: the ring, stage s at row 16 s)
  alignas(16) float kt[KD];                 // this row's key and query, normalized
  alignas(16) float q[KD];
  float A_row[kC], Q_row[kC], G[kC];
  float o_head[VD];  // the head's outputs, for the gated norm
  bf16 raw_q[KD], raw_k[KD], raw_v[VD], z[VD];
  float g, beta;
  uint64_t ring_full[kRingStages];  // kDenseBulk: a stage's bytes have landed (last: the other offsets as before)
  uint64_t keys_full[kRingStages];  // kDenseKeys: a stage of keys has landed (each once: S_b's and d's on ring_full)
};

__device__ __forceinline__ void commit_async_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits for every committed group of copies but the last one.
__device__ __forceinline__ void wait_async_copies_but_last() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// The 8 lanes' chains added as finish_corrected_value's butterfly adds them (offsets 4, 2, 1).
__device__ __forceinline__ float butterfly_in_thread(const float (&part)[kDenseLanes]) {
  return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
}

// Row s's A and Q entries as row_entries computes them (the same fma chain over the key index in order), the earlier
// row's key read from global memory kAhead 16-byte pieces ahead of its use, each piece's load issued as the piece
// kAhead before it is taken (in the row_entries form each group of four loads waited for the fmas before it).
template <int KD, int kAhead>
__device__ __forceinline__ RowEntries row_entries_streamed(const float* kt, const float* q, const float* key, float G_t,
                                                           float G_s, float beta) {
  static_assert(KD % 4 == 0 && kAhead <= KD / 4, "whole 16-byte pieces");
  const float4* kt4 = reinterpret_cast<const float4*>(kt);
  const float4* q4 = reinterpret_cast<const float4*>(q);
  const float4* key4 = reinterpret_cast<const float4*>(key);
  float4 ring[kAhead];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) ring[i] = key4[i];
  float kk = 0.0f, qk = 0.0f;
#pragma unroll
  for (int i = 0; i < KD / 4; ++i) {
    const float4 c = ring[i % kAhead];
    if (i + kAhead < KD / 4) ring[i % kAhead] = key4[i + kAhead];
    entries_step(kt4[i], q4[i], c, kk, qk);
  }
  return decayed_entries(kk, qk, G_t, G_s, beta);
}

// kEarlyState: as decode_delta_kernel's, the chunk's G and the first batch of S_b rows before the wait (the earlier
// rows' d stays a group of its own, waited for after the chains of S_b^T k; kDenseBulk: the ring's first stages).
// kRoll 16 (DUET_DELTA_DENSE_BULK=0; with DUET_DELTA_DENSE_ROLL=0 too, kRoll 0: batches; the same bits): a column
// thread keeps kRoll rows of S_b in flight at every step instead of batches of kDenseBatch (each row's load issued as
// the row kRoll before it is taken: no batch waits for the whole of the next, and no batch's registers are copied into
// the other's), and an A and Q thread its key row kKeyAhead 16-byte pieces ahead. Why: ncu at 64 rows on an H100
// (docs/benchmarks.md, 41st round) finds the kernel at 73% of the DRAM peak with 0.24 eligible warps a scheduler, half
// its stalls waiting for global loads. Measured (42nd round, H100, `duet run` at 64 streams, six alternating rounds
// each): 16 rows +0.95% (every run above every batched run, the same tokens); 32 rows -5.4% (ptxas spills 136 bytes a
// thread), so not built.
// kRoll == kDenseBulk (the default since the 44th round; the same bits): the rows of S_b, then the chunk's earlier
// rows' d, come in stages of 16 rows by bulk copies (the TMA) into a ring of 4 stages in u's room, thread 0 refilling a
// stage once the column threads are done with it; the column threads take each row from shared memory in the same
// order as before, and the A and Q threads stream their key rows as with kRoll 16. Why: at 64 rows the kernel read at
// 60-67% of the read rate (41st, 42nd rounds: 1.69 ms of a 64-row step on the H200 where the read rate gives 1.14),
// with few eligible warps; a block kept 16 rows of S_b in flight in registers (8 KB) only while its chains ran, and
// none while it copied its vectors, took d and stored; the ring keeps up to 32 KB in flight from one thread's
// instructions, from the block's start (the d rows behind S_b's), and the column threads' registers hold no rows.
// Measured (44th round, H100): `duet run` at 64 streams +0.9% (five alternating rounds), 32 streams level.
// kRoll == kDenseKeys (the default since the 48th round, DUET_DELTA_DENSE_KEYS=0 turns it off; the same bits): the
// chunk's earlier keys come through the ring too, in stages of their own ahead of S_b's, and the A and Q threads read
// them from shared memory. Why: with
// kDenseBulk each A and Q thread streams its key row (512 bytes at the 9B's heads) from global memory four 16-byte
// pieces ahead, eight of the memory's round trips one after another, where the column threads' ring takes about three
// (S_b's 8 stages, then d's, 4 in flight): at few rows, where a block's time is the kernel's, the entries may be what
// the block waits for (DUET_DENSE_CLOCK=1 prints its phases). The key stages cost the column threads a round trip
// before S_b's last stages; the row's A and Q entries are the same chains over the same values.
constexpr int kKeyAhead = 4;
// kClock: the phase clock's instantiation (dense_phase_clock; the ring's forms without early loads only), so that
// production's kernels carry none of its code.
// kVectorsFirst (with kKeyStages; DUET_DELTA_DENSE_VECTORS_FIRST=1, 48th round, prepared, off; the same bits): the
// row's vectors are asked for before the ring's first stages, not after them. Why: the phase clock finds a block
// waiting for its row's vectors 38-65% of its life (48th round, H100: 20 us of a 16-row layer's 43 us, where the bytes
// the launch reads take about 16 us at the read rate), and no chain can start before they land; behind the ring's first
// 32 KB they wait for every block's stages issued before them.
template <int KD, int VD, bool kEarlyState = false, int kRoll = 0, bool kClock = false, bool kVectorsFirst = false>
__global__ void __launch_bounds__(VD + kC, 5)
    decode_dense_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, const float* g,
                        GdnDims dims, float* out, GdnNormArrays norm) {
  constexpr bool kKeyStages = kRoll == kDenseKeys;
  constexpr bool kBulk = kRoll == kDenseBulk || kKeyStages;
  constexpr bool kRolling = !kBulk && kRoll > 1;  // kRoll 16: rolling loads in registers
  static_assert(!kVectorsFirst || (kKeyStages && !kEarlyState), "the vectors first: the keys' ring form");
  PhaseClock clock(kClock && threadIdx.x == 0 ? dense_phase_clock : nullptr);
  if constexpr (!kEarlyState) {
    wait_for_prerequisites();
    let_dependents_launch();
  }
  constexpr DeltaHeadState layout{KD, VD};
  using Smem = DenseSmem<KD, VD>;
  static_assert(KD % kDenseBatch == 0 && KD % 4 == 0 && VD % 8 == 0 && KD <= Smem::kThreads, "the thread layout");
  extern __shared__ float4 smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const DevicePiece& piece = step.piece[step.piece_order[step.multi_pieces + step.few_pieces + blockIdx.y]];
  const int32_t first_row = piece.first_row, head = blockIdx.x;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  float* state = head_state<KD, VD>(piece, layer, head);
  const int tid = threadIdx.x, t = piece.start_position % kC;
  const int64_t head_at = static_cast<int64_t>(first_row) * dims.value_heads * VD + static_cast<int64_t>(head) * VD;

  // Two groups of copies: the row's vectors and the chunk's G first, the earlier rows' d (up to 32 KB) behind them,
  // needed only after the chains of S_b^T k (kEarlyState: G and the first batch of S_b before the wait, G a group of
  // its own ahead of both; kDenseBulk: the d rows come through the ring, the second group is empty).
  constexpr int kInFlight = kRolling ? (kRoll < KD ? kRoll : KD) : kDenseBatch;
  float s_rows[kBulk ? 1 : kInFlight];
  // The ring's stages: (kKeyStages: the t earlier keys,) S_b's rows, then the t earlier rows' d (a last stage of keys
  // or d as many rows as are left).
  static_assert(!kBulk || KD % kRingRows == 0, "S_b's rows in whole stages");
  static_assert(!kKeyStages || KD <= VD, "a stage of keys fits in a stage of u's rows");
  constexpr int kStateStages = KD / kRingRows;
  const int earlier_stages = (t + kRingRows - 1) / kRingRows;
  const int key_stages = kKeyStages ? earlier_stages : 0;  // the ring's stages [0, key_stages): keys
  const int d_stage = key_stages + kStateStages;           // the first of d's
  const int stages = d_stage + earlier_stages;
  const uint32_t ring_bars = static_cast<uint32_t>(__cvta_generic_to_shared(sm.ring_full));
  const uint32_t keys_bars = static_cast<uint32_t>(__cvta_generic_to_shared(sm.keys_full));
  // A stage's barrier: the keys' stages their own, each used once; S_b's and d's a slot's, whose phases count only
  // those stages (a slot that held keys first takes S_b's stage four later as its phase 0). A wait names its phase by
  // parity alone, and a barrier still in its phase 0 reads phase 1 as complete: with the keys' phases on the slots'
  // barriers, a column thread that reached a slot before its keys had landed took stale rows (the first run of this
  // form, 47th round); with them apart, every thread waits for its barrier's phases in order.
  auto stage_bar = [&](int st) { return (st < key_stages ? keys_bars : ring_bars) + 8 * (st % kRingStages); };
  auto stage_parity = [&](int st) {
    return static_cast<uint32_t>((st / kRingStages - (st % kRingStages < key_stages ? 1 : 0)) & 1);
  };
  auto issue_stage = [&](int st) {  // by thread 0 (kKeyStages: S_b's first stages by thread VD, as keys' are released)
    const int slot = st % kRingStages;
    const int row0 = (st < key_stages ? st : st - d_stage) * kRingRows;  // a stage of keys' or d's first row
    const bool of_state = st >= key_stages && st < d_stage;
    const int rows = of_state ? kRingRows : min(kRingRows, t - row0);
    const float* src = of_state          ? state + (st - key_stages) * kRingRows * VD
                       : st < key_stages ? state + layout.keys() + row0 * KD
                                         : state + layout.d() + row0 * VD;
    const auto bytes = static_cast<uint32_t>(rows * (st < key_stages ? KD : VD) * sizeof(float));
    mbarrier_expect_bytes(stage_bar(st), bytes);
    bulk_copy(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.u[slot * kRingRows][0])), src, bytes, stage_bar(st));
  };
  auto first_rows = [&] {  // a column thread's first batch of S_b rows, or the ring's first stages
    if constexpr (kBulk) {
      if (tid == 0) {
        for (int s = 0; s < kRingStages; ++s) mbarrier_init(ring_bars + 8 * s, 1);
        if (kKeyStages)
          for (int s = 0; s < kRingStages; ++s) mbarrier_init(keys_bars + 8 * s, 1);
        fence_mbarrier_init();
        for (int st = 0; st < min(kRingStages, stages); ++st) issue_stage(st);
      }
    } else if (tid < VD) {
#pragma unroll
      for (int b = 0; b < kInFlight; ++b) s_rows[b] = state[b * VD + tid];
    }
  };
  // Stage st's rows once they have landed, and its release: every column thread is done with it (a barrier of the
  // column threads alone), then thread 0 refills its slot with stage st + 4.
  auto ring_stage = [&](int st) {
    mbarrier_wait(stage_bar(st), st < key_stages ? 0u : stage_parity(st));
    return &sm.u[(st % kRingStages) * kRingRows][0];
  };
  auto release_stage = [&](int st) {
    asm volatile("bar.sync 1, %0;" ::"n"(VD) : "memory");
    if (tid == 0 && st + kRingStages < stages) issue_stage(st + kRingStages);
  };
  // kKeyStages: the A and Q threads are done with every stage of keys (a barrier of theirs alone); thread VD refills
  // those slots with the stages four after them.
  auto release_key_stages = [&] {
    asm volatile("bar.sync 2, %0;" ::"n"(kC) : "memory");
    if (tid == VD)
      for (int st = 0; st < key_stages; ++st)
        if (st + kRingStages < stages) issue_stage(st + kRingStages);
  };
  if constexpr (kEarlyState) {
    copy_floats_async(sm.G, state + layout.G(), t);
    commit_async_copies();
    first_rows();
    wait_for_prerequisites();
    let_dependents_launch();
  } else if constexpr (kBulk && !kVectorsFirst) {
    first_rows();  // the ring fills while the row's vectors come
  }
  const bf16* row = qkv + static_cast<int64_t>(first_row) * in.width;
  copy_bf16_rows_async(sm.raw_q, row + in.q, 0, 1, KD);
  copy_bf16_rows_async(sm.raw_k, row + in.k, 0, 1, KD);
  copy_bf16_rows_async(sm.raw_v, row + in.v, 0, 1, VD);
  if (norm.out != nullptr) copy_bf16_rows_async(sm.z, norm.z + head_at, 0, 1, VD);
  if constexpr (!kEarlyState) copy_floats_async(sm.G, state + layout.G(), t);
  if (tid == 0) {
    const int64_t at = static_cast<int64_t>(first_row) * in.heads + head;
    copy_async_4(&sm.g, g + at);
    copy_async_4(&sm.beta, beta + at);
  }
  commit_async_copies();
  if constexpr (kVectorsFirst) first_rows();  // the ring's first stages behind the row's vectors
  if constexpr (!kBulk) copy_rows_async_16<VD>(&sm.u[0][0], VD, state + layout.d(), VD, t);
  commit_async_copies();

  // A column thread's first batch of S_b rows is asked for before the copies are waited for.
  const bool column = tid < VD;
  if constexpr (!kEarlyState && !kBulk) first_rows();
  wait_async_copies_but_last();
  __syncthreads();
  clock.mark(0);
  clock.count(7);

  const int warp = tid / 32;
  if (warp == 0) l2_normalize_to<KD>(sm.raw_k, in.q_scale, false, sm.kt);
  if (warp == 1) l2_normalize_to<KD>(sm.raw_q, in.q_scale, true, sm.q);
  if (tid == Smem::kThreads - 1) sm.G[t] = (t > 0 ? sm.G[t - 1] : 0.0f) + sm.g;  // as decode_delta_kernel
  __syncthreads();
  clock.mark(1);

  float wk = 0.0f, wq = 0.0f;
  if (column && kBulk) {  // the same chains, the rows from the ring
    for (int st = key_stages; st < d_stage; ++st) {
      const float* rows = ring_stage(st);
#pragma unroll
      for (int b = 0; b < kRingRows; ++b) {
        const int i = (st - key_stages) * kRingRows + b;
        const float s_i = rows[b * VD + tid];
        wk = fmaf(sm.kt[i], s_i, wk);
        wq = fmaf(sm.q[i], s_i, wq);
      }
      release_stage(st);
    }
  } else if (column && kRolling) {  // the same chains, kInFlight rows in flight at every step
#pragma unroll 1
    for (int i0 = 0; i0 < KD; i0 += kInFlight) {
#pragma unroll
      for (int b = 0; b < kInFlight; ++b) {
        const int i = i0 + b;
        const float s_i = s_rows[b];
        if (i + kInFlight < KD) s_rows[b] = state[(i + kInFlight) * VD + tid];
        wk = fmaf(sm.kt[i], s_i, wk);
        wq = fmaf(sm.q[i], s_i, wq);
      }
    }
  } else if (column) {  // S_b^T k_t and S_b^T q_t of column tid: decode_delta_kernel's chains, rows streamed in batches
#pragma unroll
    for (int i0 = 0; i0 < KD; i0 += kDenseBatch) {
      float next[kDenseBatch];
      if (i0 + kDenseBatch < KD) {
#pragma unroll
        for (int b = 0; b < kDenseBatch; ++b) next[b] = state[(i0 + kDenseBatch + b) * VD + tid];
      }
#pragma unroll
      for (int b = 0; b < kDenseBatch; ++b) {
        wk = fmaf(sm.kt[i0 + b], s_rows[b], wk);
        wq = fmaf(sm.q[i0 + b], s_rows[b], wq);
      }
      if (i0 + kDenseBatch < KD) {
#pragma unroll
        for (int b = 0; b < kDenseBatch; ++b) s_rows[b] = next[b];
      }
    }
  } else if (kKeyStages) {  // entry s of the row's A and Q (s <= t), the earlier keys from the ring
    PhaseClock entries_clock(kClock && tid == VD ? dense_phase_clock : nullptr);
    const int s = tid - VD;
    if (s <= t) {
      const float* key = s == t ? sm.kt : ring_stage(s / kRingRows) + (s % kRingRows) * KD;
      const RowEntries e = row_entries<KD>(sm.kt, sm.q, key, sm.G[t], sm.G[s], sm.beta);
      if (s < t) sm.A_row[s] = e.A;
      sm.Q_row[s] = e.Q;
    }
    entries_clock.mark(6);
    release_key_stages();
  } else {  // entry s of the row's A and Q (s <= t)
    PhaseClock entries_clock(kClock && tid == VD ? dense_phase_clock : nullptr);
    const int s = tid - VD;
    if (s <= t) {
      const float* key = s == t ? sm.kt : state + layout.keys() + s * KD;
      const RowEntries e = kRoll != 0 ? row_entries_streamed<KD, (kKeyAhead < KD / 4 ? kKeyAhead : KD / 4)>(
                                            sm.kt, sm.q, key, sm.G[t], sm.G[s], sm.beta)
                                      : row_entries<KD>(sm.kt, sm.q, key, sm.G[t], sm.G[s], sm.beta);
      if (s < t) sm.A_row[s] = e.A;
      sm.Q_row[s] = e.Q;
    }
    entries_clock.mark(6);
  }
  clock.mark(2);
  wait_async_copies();  // the earlier rows' d
  __syncthreads();
  clock.mark(3);

  const float eG = expf(sm.G[t]);
  if (column) {  // d and the output of column tid
    const int j = tid;
    float part[kDenseLanes] = {};
    float acc = 0.0f;
    if constexpr (kBulk) {  // the same chains, the rows from the ring: row r of stage st is row 16 (st - d_stage) + r
      for (int st = d_stage; st < stages; ++st) {
        const float* rows = ring_stage(st);
        const int s0 = (st - d_stage) * kRingRows;
#pragma unroll
        for (int r = 0; r < kRingRows; ++r) {
          if (s0 + r < t) {
            const float u = rows[r * VD + j];
            part[r % kDenseLanes] = fmaf(sm.A_row[s0 + r], u, part[r % kDenseLanes]);
            acc = fmaf(sm.Q_row[s0 + r], u, acc);
          }
        }
        release_stage(st);
      }
    }
    for (int s0 = 0; s0 < (kBulk ? 0 : t); s0 += kDenseLanes) {
#pragma unroll
      for (int p = 0; p < kDenseLanes; ++p) {
        const int s = s0 + p;
        if (s < t) {
          const float u = sm.u[s][j];
          part[p] = fmaf(sm.A_row[s], u, part[p]);
          acc = fmaf(sm.Q_row[s], u, acc);
        }
      }
    }
    const float d = corrected_from_sum(butterfly_in_thread(part), __bfloat162float(sm.raw_v[j]), eG, wk, sm.beta);
    const float o = fmaf(eG, wq, fmaf(sm.Q_row[t], d, acc));
    out[head_at + j] = o;
    sm.o_head[j] = o;
    state[layout.d() + t * VD + j] = d;  // the chunk's store gets the row
  }
  clock.mark(4);
  for (int i = tid; i < KD; i += Smem::kThreads) state[layout.keys() + t * KD + i] = sm.kt[i];
  if (tid == 0) state[layout.G() + t] = sm.G[t];
  __syncthreads();
  if (norm.out != nullptr && warp == 0) gated_norm_head(sm.o_head, sm.z, norm.w, norm.eps, VD, norm.out + head_at);
  clock.mark(5);
}

// ---- fold_chunk_kernel: the next chunk's S_b for the one-row pieces that completed their chunk this step
// (DeviceStep::fold_pieces, first among the one-row pieces), after the one-row kernel stored their row like any other:
// S_b' = e^{G_63} S_b + sum_s (k_s e^{G_63 - G_s}) d_s^T over the chunk's store, each element the fold's chain of
// chunk_state_kernel (e^{G_63} S_b, then the 64 rows' decayed keys times their d, in order). One block of KD threads
// a (piece, head, kFoldColumns columns): thread i a row of S. The one-row kernels folded in the completing row's own
// block before, so that one block of a 64-row step's thousands (nearly every 64-stream step has a stream at a chunk's
// end) made the kernel wait for it: bench_gdn_delta's 64 rows took 108.5 us with such rows and 91.5 us without.

constexpr int kFoldColumns = 16;

template <int KD, int VD>
struct FoldSmem {
  static constexpr int kColumns = VD < kFoldColumns ? VD : kFoldColumns;
  alignas(16) float keys[kC][KD];
  alignas(16) float u[kC][kColumns];  // the block's columns of the chunk's d
  float decay[kC];                    // e^{G_63 - G_s}
};

// Layers [first_layer, first_layer + gridDim.z / (VD / kColumns)): one launch a layer (first_layer the layer, gridDim.z
// its column groups), or one a step for all of them (launch_gdn_folds).
template <int KD, int VD>
__global__ void __launch_bounds__(KD) fold_chunk_kernel(DeviceStep step, int32_t first_layer) {
  wait_for_prerequisites();
  let_dependents_launch();
  constexpr DeltaHeadState layout{KD, VD};
  using Smem = FoldSmem<KD, VD>;
  constexpr int kColumns = Smem::kColumns;
  constexpr int kGroups = VD / kColumns;
  static_assert(kColumns % 4 == 0 && VD % kColumns == 0, "whole 16-byte pieces of the columns");
  extern __shared__ float4 smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  // The launch's width is rounded up (DeltaOrder::fold_pieces): blocks past the completing pieces have nothing to do.
  const int32_t at = step.multi_pieces + step.few_pieces + static_cast<int32_t>(blockIdx.x);
  if (at >= step.pieces) return;
  const DevicePiece& piece = step.piece[step.piece_order[at]];
  if (piece.rows != 1 || (piece.start_position + 1) % kC != 0) return;
  const int32_t head = blockIdx.y, layer = first_layer + static_cast<int32_t>(blockIdx.z) / kGroups;
  const int32_t col0 = static_cast<int32_t>(blockIdx.z) % kGroups * kColumns;
  float* state = head_state<KD, VD>(piece, layer, head);
  copy_rows_async_16<KD>(&sm.keys[0][0], KD, state + layout.keys(), KD, kC);
  copy_rows_async_16<kColumns>(&sm.u[0][0], kColumns, state + layout.d() + col0, VD, kC);
  const float* G = state + layout.G();
  for (int s = threadIdx.x; s < kC; s += blockDim.x) sm.decay[s] = expf(G[kC - 1] - G[s]);
  const float eG = expf(G[kC - 1]);
  const int i = threadIdx.x;
  float acc[kColumns];
#pragma unroll
  for (int c = 0; c < kColumns; ++c) acc[c] = state[i * VD + col0 + c] * eG;
  wait_async_copies();
  __syncthreads();
#pragma unroll 4
  for (int s = 0; s < kC; ++s) {
    const float kd = sm.keys[s][i] * sm.decay[s];
#pragma unroll
    for (int c = 0; c < kColumns; ++c) acc[c] = fmaf(kd, sm.u[s][c], acc[c]);
  }
#pragma unroll
  for (int c = 0; c < kColumns; ++c) state[i * VD + col0 + c] = acc[c];  // read and written by this thread alone
}

// ---- decode_rows_kernel: decode_delta_kernel for a piece of a few rows inside one chunk (a verify piece: the last
// token and its drafts, delta_chunks.h: decode_kernels_take), its rows one after another in one kernel. Each row's
// entries are the chains decode_delta_kernel computes for it when the rows come one step at a time (and so the chunked
// form's): a row's A and Q entries, S_b^T k and S_b^T q, d, the output, the gated norm and the fold are the same fma
// chains over the same operands. The piece's earlier rows' keys, d and G, which a one-row step would read back from
// the state, are here the very floats it would have written there, kept in shared memory. Only d (and the outputs,
// which read every d) depend on the rows before; everything else of all rows is computed at once, and the solve walks
// the rows in order. Only the last row can complete the chunk, so every row reads the same S_b.
template <int KD, int VD, int VC = columns_for(VD)>
struct RowsSmem {
  static constexpr int kPieceRows = kDecodePieceRows;
  static constexpr int kGroups = VD / VC;
  static constexpr int kRows = kC / kGroups;  // key rows per group, as DecodeSmem
  static constexpr int kKeyStride = KD + 4;   // as DecodeSmem (the fold reads other groups' rows by it)
  static constexpr int kVecStride = KD + 4;   // the piece's rows' vectors: rows read at once fall in different banks
  alignas(16) float S[KD][VC];                // the group's columns of S_b
  alignas(16) float k[kRows][kKeyStride];     // the group's key rows from before the piece
  float kt[kPieceRows][kVecStride];           // the piece's rows' keys and queries, normalized
  float q[kPieceRows][kVecStride];
  alignas(16) float u[kC][VC + VC / 8];  // the group's columns of the earlier rows' d, then the piece's v and d
  float A_part[kPieceRows][kRows], Q_part[kPieceRows][kRows];  // the rows' entries for the group's key rows
  union {
    struct {
      float A_row[kPieceRows][kC], Q_row[kPieceRows][kC];  // the whole A and Q rows, gathered
    } rows;
    float o_head[kPieceRows][VD];  // group 0, once the rows are used: the head's outputs, for the gated norm
  };
  float G[kC], decay[kC];
  float eG[kPieceRows];  // e^{G_t} of the piece's rows
  float wk[kPieceRows][VC], wq[kPieceRows][VC];
  float o[kPieceRows][VC];  // this group's outputs, read by group 0 for the gated norm
  union {                   // (16-byte rows: the copies into them are 16 bytes at a time)
    struct {
      alignas(16) bf16 q[kPieceRows][KD];
      bf16 k[kPieceRows][KD];
    } raw;                               // the rows' raw queries and keys, until normalized
    alignas(16) bf16 z[kPieceRows][VD];  // then group 0: the head's gates, for the gated norm
  };
  alignas(16) bf16 raw_v[kPieceRows][VC];
  float g[kPieceRows], beta[kPieceRows];
};

template <int KD, int VD>
__global__ void __launch_bounds__(kThreads)
    decode_rows_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, const float* g, GdnDims dims,
                       float* out, GdnNormArrays norm) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  constexpr DeltaHeadState layout{KD, VD};
  constexpr int VC = columns_for(VD);
  constexpr int kLanes = lanes_for(VD);
  constexpr int kU = VC + VC / 8;
  using Smem = RowsSmem<KD, VD>;
  constexpr int kRows = Smem::kRows;
  static_assert(32 % kLanes == 0, "a column's lanes in one warp (the solve syncs a warp between rows)");
  extern __shared__ float4 smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();

  const DevicePiece& piece = step.piece[step.piece_order[step.multi_pieces + blockIdx.x]];
  const DeviceChunk chunk = step.chunk[piece.first_chunk];  // its only chunk
  const int32_t head = blockIdx.y, group = blockIdx.z, col0 = group * VC;
  const HeadInputs in = head_inputs<KD, VD>(dims, head);
  float* state = head_state<KD, VD>(piece, layer, head);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int a = chunk.filled, rows = chunk.rows;  // the piece's rows are the chunk's rows [a, a + rows)
  const bool completes = a + rows == kC;          // its last row completes the chunk
  const int first_key = group * kRows;            // the group's key rows, as decode_delta_kernel's
  const int own_keys = max(0, min(kRows, a - first_key));

  const bf16* first = qkv + static_cast<int64_t>(chunk.first_row) * in.width;
  copy_bf16_rows_async(&sm.raw.q[0][0], first + in.q, in.width, rows, KD);
  copy_bf16_rows_async(&sm.raw.k[0][0], first + in.k, in.width, rows, KD);
  copy_bf16_rows_async(&sm.raw_v[0][0], first + in.v + col0, in.width, rows, VC);
  copy_group_state_async<KD, VD, VC>(sm, state, col0, a, first_key, own_keys);
  for (int r = tid; r < rows; r += kThreads) {
    const int64_t at = static_cast<int64_t>(chunk.first_row + r) * in.heads + head;
    copy_async_4(&sm.g[r], g + at);
    copy_async_4(&sm.beta[r], beta + at);
  }
  wait_async_copies();
  __syncthreads();

  // Every row's key and query normalized (l2_normalize_to, as every path), its v into u, and G_t = G_{t-1} + g_t in
  // order (e^{G_t} beside it, decode_delta_kernel's eG).
  for (int vec = warp; vec < 2 * rows; vec += kThreads / 32) {  // even: row vec / 2's key, odd: its query
    const int r = vec / 2;
    const bool is_query = vec % 2 == 1;
    l2_normalize_to<KD>(is_query ? sm.raw.q[r] : sm.raw.k[r], in.q_scale, is_query, is_query ? sm.q[r] : sm.kt[r]);
  }
  for (int idx = tid; idx < rows * VC; idx += kThreads)
    sm.u[a + idx / VC][idx % VC] = __bfloat162float(sm.raw_v[idx / VC][idx % VC]);
  if (tid == 0) {
    float G = a > 0 ? sm.G[a - 1] : 0.0f;
    for (int r = 0; r < rows; ++r) {
      G = G + sm.g[r];
      sm.G[a + r] = G;
      sm.eG[r] = expf(G);
    }
  }
  __syncthreads();

  const int64_t out_stride = static_cast<int64_t>(dims.value_heads) * VD;
  const int64_t head_at = static_cast<int64_t>(chunk.first_row) * out_stride + static_cast<int64_t>(head) * VD;
  // The raw vectors are dead: group 0's gates come in behind the arithmetic, for the gated norm at the end.
  if (norm.out != nullptr && group == 0) copy_bf16_rows_async(&sm.z[0][0], norm.z + head_at, out_stride, rows, VD);

  // What does not depend on d, for every row at once, one chain per task: entry (r, s) of row r's A and Q for the
  // group's key rows s <= t (decode_delta_kernel's chain: the piece's own earlier keys in kt, as the state would hold
  // them), and S_b^T k_t, S_b^T q_t per column (its chain too).
  const int entries = rows * kRows, chains = 2 * rows * VC;
  for (int task = tid; task < entries + chains; task += kThreads) {
    if (task < entries) {
      const int r = task / kRows, s = first_key + task % kRows, t = a + r;
      if (s > t) continue;
      const float* key = s >= a ? sm.kt[s - a] : sm.k[s - first_key];
      float kk = 0.0f, qk = 0.0f;
#pragma unroll 8
      for (int i = 0; i < KD; ++i) {
        kk = fmaf(sm.kt[r][i], key[i], kk);
        qk = fmaf(sm.q[r][i], key[i], qk);
      }
      const float decay = expf(sm.G[t] - sm.G[s]);
      if (s < t) sm.A_part[r][s - first_key] = (kk * decay) * sm.beta[r];
      sm.Q_part[r][s - first_key] = qk * decay;
    } else {
      const int x = task - entries, j = x % VC, which = x / VC;  // which: 2 r for k_t, 2 r + 1 for q_t
      const int r = which / 2;
      const float* vec = which % 2 == 0 ? sm.kt[r] : sm.q[r];
      float acc = 0.0f;
#pragma unroll 16
      for (int i = 0; i < KD; ++i) acc = fmaf(vec[i], sm.S[i][j], acc);
      (which % 2 == 0 ? sm.wk[r] : sm.wq[r])[j] = acc;
    }
  }
  if (completes)  // the fold's decays
    for (int s = tid; s < kC; s += kThreads) sm.decay[s] = expf(sm.G[kC - 1] - sm.G[s]);
  cluster.sync();  // every group's A and Q entries are written and visible across the cluster
  for (int idx = tid; idx < rows * kC; idx += kThreads) {
    const int r = idx / kC, s = idx % kC;
    if (s > a + r) continue;
    const int owner = s / kRows, at = s % kRows;
    if (s < a + r) sm.rows.A_row[r][s] = cluster.map_shared_rank(&sm.A_part[r][0], owner)[at];
    sm.rows.Q_row[r][s] = cluster.map_shared_rank(&sm.Q_part[r][0], owner)[at];
  }
  __syncthreads();

  // d of the rows in order (corrected_value, as decode_delta_kernel): a column's kLanes lanes are one warp's, and
  // only they read and write the column, so a warp sync between rows orders d_t before row t + 1's sum reads it.
  const int col = tid / kLanes, p = tid % kLanes;
  for (int r = 0; r < rows; ++r) {
    const int t = a + r;
    const float d = corrected_value<kLanes>(sm.rows.A_row[r], &sm.u[0][col], kU, t, sm.u[t][col], sm.eG[r],
                                            sm.wk[r][col], sm.beta[r]);
    __syncwarp();  // every lane of the column has read v_t before d_t takes its place
    if (p == 0) sm.u[t][col] = d;
    __syncwarp();
  }
  __syncthreads();

  for (int idx = tid; idx < rows * VC; idx += kThreads) {  // o_t = e^{G_t} wq_t + sum_{s<=t} Q[t][s] d_s
    const int r = idx / VC, j = idx % VC, t = a + r;
    float acc = 0.0f;
    for (int s = 0; s <= t; ++s) acc = fmaf(sm.rows.Q_row[r][s], sm.u[s][j], acc);
    const float o = fmaf(sm.eG[r], sm.wq[r][j], acc);
    out[head_at + r * out_stride + col0 + j] = o;
    sm.o[r][j] = o;
  }
  // Every group's outputs are visible, and no group reads another's A and Q entries any more.
  cluster.sync();
  if (norm.out != nullptr) {  // the same for every block: the whole cluster takes part or none of it
    if (group == 0) {
      wait_async_copies();  // the gates, copied by several warps: each waits for its own, then the block
      __syncthreads();
      for (int r = warp; r < rows; r += kThreads / 32) {  // a warp a row, as gated_norm_kernel
        for (int i = lane; i < VD; i += 32) sm.o_head[r][i] = cluster.map_shared_rank(&sm.o[r][0], i / VC)[i % VC];
        __syncwarp();
        gated_norm_head(sm.o_head[r], sm.z[r], norm.w, norm.eps, VD, norm.out + head_at + r * out_stride);
      }
    }
    cluster.sync();  // no block leaves (freeing the outputs it shares) before group 0 has read them
  }
  if (completes) {  // the next chunk's S_b: decode_delta_kernel's fold, the piece's keys from kt
    constexpr int kRowThreads = kThreads / KD, kCols = VC / kRowThreads;
    static_assert(kThreads % KD == 0 && VC % kRowThreads == 0, "the fold's thread layout");
    const int i = tid / kRowThreads, j0 = (tid % kRowThreads) * kCols;
    const float eG = sm.eG[rows - 1];
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = sm.S[i][j0 + c] * eG;
#pragma unroll 4
    for (int s = 0; s < kC; ++s) {
      const int owner = s / kRows;
      const float key = s >= a ? sm.kt[s - a][i]
                        : owner == group
                            ? sm.k[s % kRows][i]
                            : cluster.map_shared_rank(&sm.k[0][0], owner)[(s % kRows) * Smem::kKeyStride + i];
      const float kd = key * sm.decay[s];
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[c] = fmaf(kd, sm.u[s][j0 + c], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) state[i * VD + col0 + j0 + c] = acc[c];  // read and written by this thread alone
    cluster.sync();  // no block leaves (freeing its keys) before every group has read them
    return;
  }
  // The piece's rows join the chunk's in the state: d by each group, keys and G by group 0 (no group reads the
  // state's rows [a, a + rows) in this step).
  for (int idx = tid; idx < rows * VC; idx += kThreads)
    state[layout.d() + static_cast<int64_t>(a + idx / VC) * VD + col0 + idx % VC] = sm.u[a + idx / VC][idx % VC];
  if (group == 0) {
    for (int idx = tid; idx < rows * KD; idx += kThreads)
      state[layout.keys() + static_cast<int64_t>(a + idx / KD) * KD + idx % KD] = sm.kt[idx / KD][idx % KD];
    for (int r = tid; r < rows; r += kThreads) state[layout.G() + a + r] = sm.G[a + r];
  }
}

// Kernels needing more than 48 KiB of shared memory opt in (once per instantiation).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
             "gdn delta rule: shared memory opt-in");
}

// A switch read from the environment (by its caller, once): on unless "0" when on by default, off unless "1" if not;
// and for the walk's forms (the same bits either way) a test's choice when it set one (for_tests 0 or 1).
bool env_switch(const char* name, bool on_by_default) {
  const char* v = std::getenv(name);
  return on_by_default ? v == nullptr || std::strcmp(v, "0") != 0 : v != nullptr && std::strcmp(v, "1") == 0;
}
bool chosen(const std::atomic<int32_t>& for_tests, bool setting) {
  const int32_t choice = for_tests.load();
  return choice >= 0 ? choice != 0 : setting;
}

// The walk's outputs in tiles (walk_outputs_in_tiles), the default since the 44th round (H100: bench_gdn_delta a
// layer's prefill of 4,096 rows 1,301.8 against 1,363.7 us, 1,024 rows 338.3 against 355.9; `duet run` prefill of 4K
// 1.5% faster); DUET_DELTA_WALK_TILES=0 a column a lane (for A/B).
std::atomic<int32_t> walk_tiles_for_tests{-1};
bool walk_tiled_outputs() {
  static const bool on = env_switch("DUET_DELTA_WALK_TILES", true);
  return chosen(walk_tiles_for_tests, on);
}

// The walk's wide form (chunk_state_kernel, kWide), the default since the 45th round (H100: bench_gdn_delta a layer's
// prefill of 4,096 rows 1,274.1 against 1,302.6 us, 1,024 rows 329.9 against 339.6; `duet run` prefill of 1K 1.9% and
// 4K 0.9% faster); DUET_DELTA_WALK_WIDE=0 the narrow form (for A/B).
std::atomic<int32_t> walk_wide_for_tests{-1};
bool walk_wide() {
  static const bool on = env_switch("DUET_DELTA_WALK_WIDE", true);
  return chosen(walk_wide_for_tests, on);
}

// The batched normalizing of a chunk's new keys and queries (l2_normalize_rows; chunk_matrices_kernel's and the
// tensor-core walk's kNormBatch): DUET_DELTA_NORM_BATCH=1 (48th round, prepared, off until it has run on a GPU; the
// same bits).
std::atomic<int32_t> norm_batch_for_tests{-1};
bool norm_batch() {
  static const bool on = env_switch("DUET_DELTA_NORM_BATCH", false);
  return chosen(norm_batch_for_tests, on);
}

// The walk's inputs by bulk copies (chunk_state_kernel's kBulkInputs, with the tensor-core form; not with
// DUET_DELTA_NORM_BATCH, which it takes precedence over): DUET_DELTA_WALK_BULK=1 (48th round, prepared, off until it
// has run on a GPU; the same bits).
std::atomic<int32_t> walk_bulk_for_tests{-1};
bool walk_bulk_inputs() {
  static const bool on = env_switch("DUET_DELTA_WALK_BULK", false);
  return chosen(walk_bulk_for_tests, on);
}

// The walk's split form (chunk_state_kernel, kSplitFold; with the wide form only): DUET_DELTA_WALK_SPLIT=1 (45th round;
// timed in the 46th, H100: bench_gdn_delta 4,096 rows 1,195.8 against the wide form's 1,269.1 us, `duet run` 4K
// prefill 0.8% faster, both below the tensor-core form, so off).
std::atomic<int32_t> walk_split_for_tests{-1};
bool walk_split_fold() {
  static const bool on = env_switch("DUET_DELTA_WALK_SPLIT", false);
  return chosen(walk_split_for_tests, on);
}

// The walk's tensor-core form for WY chunks (chunk_state_kernel, kMmaPasses; with the wide form), the default since the
// 46th round (H100: bench_gdn_delta a layer's prefill of 4,096 rows 1,085.7 against 1,267.7 us, 1,024 rows 283.3
// against 334.9; `duet run` prefill of 1K 2.9% and 4K 2.0% faster; its own bits for a prompt's chunks, the rows gate
// as the FMA form's on the same card, exactness 255 / 0 / 0); DUET_DELTA_WALK_MMA=0 the FMA form. Tests: 3 the form,
// 1 its one-pass control, 0 off.
std::atomic<int32_t> walk_mma_for_tests{-1};
// A tensor-core form's TF32 passes: a test's choice when it set one (3, 1 or 0), else 3 where its switch is on.
int passes_chosen(const std::atomic<int32_t>& for_tests, bool setting) {
  const int32_t choice = for_tests.load();
  return choice >= 0 ? choice : setting ? 3 : 0;
}
int walk_mma_passes() {
  static const bool on = env_switch("DUET_DELTA_WALK_MMA", true);
  return passes_chosen(walk_mma_for_tests, on);
}

// DUET_DELTA_WY=0: every chunk in the row-by-row form, the WY form's chunks too (for measurements; read once).
bool wy_form_allowed() {
  static const bool on = env_switch("DUET_DELTA_WY", true);
  return on;
}

// From how many one-row pieces a step takes decode_dense_kernel instead of decode_delta_kernel's clusters (the same
// bits either way). `duet run` on an H100 (33rd round), decode tok/s, clusters against dense: 64 streams 5,860 against
// 5,998, 16 streams 2,111 against 2,114, one stream 154 against 153 (32 blocks where the clusters have 128): dense from
// 32 pieces then. With the state through the ring of bulk copies (45th round, H100, two alternating rounds, the same
// tokens): 16 streams 2,224 against 2,278 (+2.5%), 8 streams 1,202 against 1,218 (+1.3%), 4 streams 632 against 636
// (+0.6%), one stream 165 against 164 (-0.6%): dense from 4 pieces. DUET_DELTA_DECODE=clusters (never), dense (from
// one) or dense:N (from N) for measurements; a test's choice when it set one.
constexpr int32_t kDenseDecodeFromPieces = 4;
std::atomic<int32_t> dense_from_for_tests{-1};
int32_t dense_decode_from() {
  static const int32_t from_environment = [] {
    const char* v = std::getenv("DUET_DELTA_DECODE");
    if (v == nullptr) return kDenseDecodeFromPieces;
    if (std::strcmp(v, "clusters") == 0) return std::numeric_limits<int32_t>::max();
    if (std::strncmp(v, "dense", 5) != 0) return kDenseDecodeFromPieces;
    if (v[5] == ':') return std::max(1, std::atoi(v + 6));
    return 1;
  }();
  const int32_t for_tests = dense_from_for_tests.load();
  return for_tests >= 0 ? for_tests : from_environment;
}

// How decode_dense_kernel reads S_b (kRoll): the ring of bulk copies (kDenseBulk, the default since the 44th round:
// `duet run` at 64 streams on an H100, five alternating rounds, 6,268 against 6,213 tok/s, +0.9%, the same tokens;
// bench_gdn_delta's 64 rows 100.9 against 104.4 us a layer, the same fingerprints); with DUET_DELTA_DENSE_BULK=0 the
// rolling loads of 16 rows in flight (the 42nd round's), and with that and DUET_DELTA_DENSE_ROLL=0 the batches before
// them (read once; for A/B). Since the 48th round the ring carries the chunk's earlier keys in stages ahead of S_b's
// (kDenseKeys; DUET_DELTA_DENSE_KEYS=0 gives the ring without them): on an H100, `duet run` at 64 streams 6,371 against
// 6,314 tok/s (+0.9%, two alternating rounds, the same tokens), 16 streams level; bench_gdn_delta's 64 rows 95.9
// against 101.5 us a layer (the block's wait for its A and Q entries 28% -> 5% of its cycles), the same fingerprints.
std::atomic<int32_t> dense_loads_for_tests{-1};
std::atomic<bool> dense_clock_on{false};  // set_dense_phase_clock_for_tests: the clocked instantiations
int dense_loads() {
  static const int loads = [] {
    const char* bulk = std::getenv("DUET_DELTA_DENSE_BULK");
    const char* keys = std::getenv("DUET_DELTA_DENSE_KEYS");
    const char* first = std::getenv("DUET_DELTA_DENSE_VECTORS_FIRST");
    if (bulk == nullptr || std::strcmp(bulk, "0") != 0) {
      if (keys != nullptr && std::strcmp(keys, "0") == 0) return kDenseBulk;
      return first != nullptr && std::strcmp(first, "1") == 0 ? kDenseKeysVectorsFirst : kDenseKeys;
    }
    const char* v = std::getenv("DUET_DELTA_DENSE_ROLL");
    return v != nullptr && std::strcmp(v, "0") == 0 ? 0 : 16;
  }();
  const int32_t for_tests = dense_loads_for_tests.load();
  return for_tests >= 0 ? for_tests : loads;
}

// The folds of `layers` layers from `first_layer`, after the one-row kernel has stored the completing rows, in plain
// stream order: as a dependent launch its blocks (36 KB of shared memory each) sat on the SMs through the one-row
// kernel's waves, waiting, and took a third of its blocks' room (bench_gdn_delta, 64 rows: 124 us against 108 with the
// fold in the completing row's block).
template <int KD, int VD>
void launch_folds(const DeviceStep& step, GdnDims dims, int32_t first_layer, int32_t layers, cudaStream_t stream) {
  constexpr size_t fold_bytes = sizeof(FoldSmem<KD, VD>);
  static const bool opted_in = (allow_smem(fold_chunk_kernel<KD, VD>, fold_bytes), true);
  (void)opted_in;
  const auto groups = static_cast<unsigned>(VD / FoldSmem<KD, VD>::kColumns);
  fold_chunk_kernel<KD, VD><<<dim3(static_cast<unsigned>(step.fold_pieces), static_cast<unsigned>(dims.value_heads),
                                   groups * static_cast<unsigned>(layers)),
                              KD, fold_bytes, stream>>>(step, first_layer);
  check_launch("gdn fold_chunk_kernel");
}

template <int KD, int VD>
void launch(const DeviceStep& step, int32_t layer, const bf16* qkv, const float* beta, const float* g, GdnDims dims,
            float* scratch, float* out, const GdnNormArrays& norm, DeltaFolds folds, cudaStream_t stream) {
  constexpr int VC = columns_for(VD);
  constexpr size_t matrices_bytes = sizeof(MatricesSmem<KD>);
  constexpr size_t state_bytes = sizeof(StateSmem<KD, VC>), wide_state_bytes = sizeof(StateSmem<KD, VC, true>);
  constexpr size_t mma_state_bytes = sizeof(StateSmem<KD, VC, true, true>);
  constexpr size_t bulk_state_bytes = sizeof(BulkStateSmem<StateSmem<KD, VC, true, true>>);
  constexpr size_t decode_bytes = sizeof(DecodeSmem<KD, VD>);
  constexpr size_t rows_bytes = sizeof(RowsSmem<KD, VD>);
  constexpr size_t dense_bytes = sizeof(DenseSmem<KD, VD>);
  // Six blocks an SM (228 KB, 1 KB of each block's reserved) at the 9B's shape: the kernel is latency-bound.
  static_assert(KD != 128 || VD != 128 || decode_bytes <= 37 * 1024, "decode_delta_kernel: 6 blocks per SM");
  static_assert(state_bytes <= 227 * 1024 && wide_state_bytes <= 227 * 1024 && bulk_state_bytes <= 227 * 1024,
                "chunk_state_kernel: one block an SM at most");
  // Four blocks an SM at the 9B's shape (55 KB: every row's vectors); a verify step of one stream is 128 blocks.
  static_assert(KD != 128 || VD != 128 || rows_bytes <= 56 * 1024, "decode_rows_kernel: 4 blocks per SM");
  static const bool opted_in =
      (allow_smem(chunk_matrices_kernel<KD, VD>, matrices_bytes),
       allow_smem(chunk_matrices_kernel<KD, VD, true>, matrices_bytes),
       allow_smem(chunk_state_kernel<KD, VD>, state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true>, wide_state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true, true>, wide_state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true, false, 3>, mma_state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true, false, 3, true>, mma_state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true, false, 3, false, true>, bulk_state_bytes),
       allow_smem(chunk_state_kernel<KD, VD, true, false, 1>, mma_state_bytes),
       allow_smem(decode_delta_kernel<KD, VD, false>, decode_bytes),
       allow_smem(decode_delta_kernel<KD, VD, true>, decode_bytes), allow_smem(decode_rows_kernel<KD, VD>, rows_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, 0>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, true, 0>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, 16>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, true, 16>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseBulk>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, true, kDenseBulk>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseKeys>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, true, kDenseKeys>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseBulk, true>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseKeys, true>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseKeys, false, true>, dense_bytes),
       allow_smem(decode_dense_kernel<KD, VD, false, kDenseKeys, true, true>, dense_bytes), true);
  (void)opted_in;
  const int32_t single_pieces = step.pieces - step.multi_pieces - step.few_pieces;
  if (step.multi_chunks > 0) {
    const bool batched = norm_batch();
    const auto matrices = batched ? chunk_matrices_kernel<KD, VD, true> : chunk_matrices_kernel<KD, VD>;
    matrices<<<dim3(step.multi_chunks, dims.value_heads), kThreads, matrices_bytes, stream>>>(
        step, layer, qkv, beta, g, dims, scratch, wy_form_allowed());
    check_launch("gdn chunk_matrices_kernel");
  }
  if (step.multi_pieces > 0) {
    const dim3 grid(static_cast<unsigned>(step.multi_pieces), static_cast<unsigned>(dims.value_heads), VD / VC);
    const bool wide = walk_wide();
    const int mma = wide ? walk_mma_passes() : 0;
    const bool bulk = mma == 3 && walk_bulk_inputs();
    const auto walk = bulk                       ? chunk_state_kernel<KD, VD, true, false, 3, false, true>
                      : mma == 3 && norm_batch() ? chunk_state_kernel<KD, VD, true, false, 3, true>
                      : mma == 3                 ? chunk_state_kernel<KD, VD, true, false, 3>
                      : mma == 1                 ? chunk_state_kernel<KD, VD, true, false, 1>
                      : !wide                    ? chunk_state_kernel<KD, VD, false>
                      : walk_split_fold()        ? chunk_state_kernel<KD, VD, true, true>
                                                 : chunk_state_kernel<KD, VD, true>;
    const size_t walk_bytes = bulk       ? bulk_state_bytes
                              : mma != 0 ? mma_state_bytes
                              : wide     ? wide_state_bytes
                                         : state_bytes;
    walk<<<grid, kWalkThreads, walk_bytes, stream>>>(step, layer, qkv, beta, dims, scratch, out, wy_form_allowed(),
                                                     walk_tiled_outputs());
    check_launch("gdn chunk_state_kernel");
    chunk_tail_kernel<KD, VD>
        <<<dim3(step.multi_pieces, dims.value_heads), kThreads, 0, stream>>>(step, layer, qkv, dims, scratch);
    check_launch("gdn chunk_tail_kernel");
  }
  if (step.few_pieces > 0) {  // a cluster per head, as decode_delta_kernel
    launch_dependent_clusters("decode_rows_kernel", decode_rows_kernel<KD, VD>,
                              dim3(step.few_pieces, dims.value_heads, VD / VC), dim3(1, 1, VD / VC), kThreads,
                              rows_bytes, stream, step, layer, qkv, beta, g, dims, out, norm);
    check_launch("gdn decode_rows_kernel");
  }
  if (single_pieces > 0 && single_pieces >= dense_decode_from()) {
    // Heads fastest, so that the pieces delta_order puts first (those that fold) start first.
    const bool early = early_loads(), clocked = dense_clock_on.load();
    const int loads = dense_loads();
    const auto kernel =
        clocked && loads == kDenseBulk               ? decode_dense_kernel<KD, VD, false, kDenseBulk, true>
        : clocked && loads == kDenseKeys             ? decode_dense_kernel<KD, VD, false, kDenseKeys, true>
        : clocked && loads == kDenseKeysVectorsFirst ? decode_dense_kernel<KD, VD, false, kDenseKeys, true, true>
        : loads == kDenseKeysVectorsFirst            ? decode_dense_kernel<KD, VD, false, kDenseKeys, false, true>
        : loads == 16 ? (early ? decode_dense_kernel<KD, VD, true, 16> : decode_dense_kernel<KD, VD, false, 16>)
        : loads == kDenseBulk
            ? (early ? decode_dense_kernel<KD, VD, true, kDenseBulk> : decode_dense_kernel<KD, VD, false, kDenseBulk>)
        : loads == kDenseKeys
            ? (early ? decode_dense_kernel<KD, VD, true, kDenseKeys> : decode_dense_kernel<KD, VD, false, kDenseKeys>)
            : (early ? decode_dense_kernel<KD, VD, true, 0> : decode_dense_kernel<KD, VD, false, 0>);
    launch_dependent("decode_dense_kernel", kernel, dim3(dims.value_heads, single_pieces),
                     dim3(DenseSmem<KD, VD>::kThreads), dense_bytes, stream, step, layer, qkv, beta, g, dims, out,
                     norm);
    check_launch("gdn decode_dense_kernel");
  } else if (single_pieces > 0) {
    // A head's column groups form one cluster (the gated norm gathers their outputs).
    launch_dependent_clusters("decode_delta_kernel",
                              early_loads() ? decode_delta_kernel<KD, VD, true> : decode_delta_kernel<KD, VD, false>,
                              dim3(single_pieces, dims.value_heads, VD / VC), dim3(1, 1, VD / VC), kThreads,
                              decode_bytes, stream, step, layer, qkv, beta, g, dims, out, norm);
    check_launch("gdn decode_delta_kernel");
  }
  if (step.fold_pieces > 0 && folds == DeltaFolds::each_layer) launch_folds<KD, VD>(step, dims, layer, 1, stream);
}

}  // namespace

// The shapes the kernels are compiled for: Qwen3.5's GDN heads (128 x 128) and the tiny test models' (16 x 32), the two
// the GPU tests check. Each pair is four kernels' instantiations (a sixth of this file's compile time each, which every
// fresh build paid for 16 pairs: docs/benchmarks.md, "Build time", tenth pass); a model with other heads is refused
// when its state storage is planned (cuda_backend.cc) and runs on the CPU backend.
bool gdn_delta_rule_supports(int64_t key_dim, int64_t value_dim) {
  return (key_dim == 16 && value_dim == 32) || (key_dim == 128 && value_dim == 128);
}

void set_delta_decode_dense_from_for_tests(int32_t pieces) { dense_from_for_tests.store(pieces); }
void set_delta_dense_loads_for_tests(int32_t loads) { dense_loads_for_tests.store(loads); }
void set_delta_walk_tiles_for_tests(int32_t on) { walk_tiles_for_tests.store(on); }
void set_delta_walk_wide_for_tests(int32_t on) { walk_wide_for_tests.store(on); }
void set_delta_norm_batch_for_tests(int32_t on) { norm_batch_for_tests.store(on); }
void set_delta_walk_bulk_for_tests(int32_t on) { walk_bulk_for_tests.store(on); }
void set_delta_walk_split_for_tests(int32_t on) { walk_split_for_tests.store(on); }
void set_delta_walk_mma_for_tests(int32_t passes) { walk_mma_for_tests.store(passes); }
void set_walk_phase_clock_for_tests(unsigned long long* sums) {
  check_cuda(cudaMemcpyToSymbol(walk_phase_clock, &sums, sizeof sums), "set_walk_phase_clock_for_tests");
}
void set_dense_phase_clock_for_tests(unsigned long long* sums) {
  check_cuda(cudaMemcpyToSymbol(dense_phase_clock, &sums, sizeof sums), "set_dense_phase_clock_for_tests");
  dense_clock_on.store(sums != nullptr);
}

void launch_gdn_delta_rule(const DeviceStep& step, int32_t gdn_layer, const bf16* qkv, const float* beta,
                           const float* g, GdnDims dims, float* chunk_scratch, float* out, cudaStream_t stream,
                           const GdnNormArrays* norm, DeltaFolds folds) {
  if (dims.key_heads <= 0 || dims.value_heads <= 0 || dims.value_heads % dims.key_heads != 0)
    check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: value_heads must be a multiple of key_heads");
  if (step.chunks <= 0) return;
  if (chunk_scratch == nullptr) check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: no chunk scratch");
  if (norm != nullptr && (norm->out == nullptr || norm->z == nullptr || norm->w.data == nullptr ||
                          norm->w.rows * norm->w.cols != dims.value_dim))
    check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: a gated norm needs z, out and a value_dim weight");
  const GdnNormArrays none;
  const GdnNormArrays& n = norm != nullptr ? *norm : none;
  if (dims.key_dim == 16 && dims.value_dim == 32)
    return launch<16, 32>(step, gdn_layer, qkv, beta, g, dims, chunk_scratch, out, n, folds, stream);
  if (dims.key_dim == 128 && dims.value_dim == 128)
    return launch<128, 128>(step, gdn_layer, qkv, beta, g, dims, chunk_scratch, out, n, folds, stream);
  check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: key_dim x value_dim must be 16 x 32 or 128 x 128");
}

void launch_gdn_folds(const DeviceStep& step, int32_t gdn_layers, GdnDims dims, cudaStream_t stream) {
  if (step.fold_pieces <= 0 || gdn_layers <= 0) return;
  if (dims.key_dim == 16 && dims.value_dim == 32) return launch_folds<16, 32>(step, dims, 0, gdn_layers, stream);
  if (dims.key_dim == 128 && dims.value_dim == 128) return launch_folds<128, 128>(step, dims, 0, gdn_layers, stream);
  check_cuda(cudaErrorInvalidValue, "launch_gdn_folds: key_dim x value_dim must be 16 x 32 or 128 x 128");
}

// DUET_DELTA_FOLDS=step (prepared, off): the one-row pieces' folds of every GDN layer in one launch after the step's
// last GDN layer, instead of one launch after each layer's delta rule. Each layer's fold of a step is read first by the
// next step's delta rule of that layer (a one-row piece writes no snapshot, and a piece is its sequence's only one in a
// step), so the state a step leaves is the same. Why: bench_gdn_delta's 64 rows take 85 us with one completing row and
// 63 us with none (47th round, H200): a fold launch is a kernel's latency for 6 MB, paid each layer, and most
// 64-stream steps have a completing row.
DeltaFolds delta_folds() {
  static const DeltaFolds folds = [] {
    const char* v = std::getenv("DUET_DELTA_FOLDS");
    return v != nullptr && std::strcmp(v, "step") == 0 ? DeltaFolds::after_last_layer : DeltaFolds::each_layer;
  }();
  return folds;
}

}  // namespace duet::backend::cuda
