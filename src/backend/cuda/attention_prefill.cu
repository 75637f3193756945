// Prefill attention on tensor cores: every row of every prefill piece of a step, causal, over the paged KV cache,
// times sigmoid(gate) (launch_attention in kernels.h; decode rows take attention.cu's decode kernel).
//
// A block takes a tile of 64 queries (64 / group consecutive rows of one piece x the group's query heads of one KV
// head) and walks the key blocks (pages) 0 .. (the tile's last position) / 64 in order, FlashAttention-2 style: K and V
// of a key block staged in shared memory by cp.async (V's copy runs under the scores, the next K's under P.V), each of
// the 4 warps holding 16 queries' scores, softmax statistics and outputs in registers, products by mma.sync.
//
// The arithmetic of one query (a row and a query head), whatever tile it is in:
//   m = -inf, l = 0, acc[d] = 0
//   for each key block b = 0 .. (the tile's last position) / 64, keys 64b .. 64b + 63:
//     s_t = (q . k_t) * scale     the dot by mma_16x8x16 over d in k-steps of 16, ascending, fp32 accumulation;
//                                 s_t = -inf for a key past the query's position
//     m'  = max(m, max_t s_t)     (exact, in any order)
//     c   = exp(m - m'),  p_t = exp(s_t - m')
//     l   = l * c + r             r: the lane's p_t summed in key order, then a fixed butterfly over the row's 4 lanes
//     acc = acc * c, then acc += P_hi V, acc += P_lo V per k-step of 16 keys, ascending, where P_hi = bf16(p) and
//           P_lo = bf16(p - P_hi): p to about 2^-17 through BF16 tensor cores (V's BF16 values are exact)
//   out = bf16((acc / l) * sigmoid(gate))
// A key block past a query's position changes nothing: its p are 0 and c = exp(0) = 1 (V rows past the tile's last
// key are staged as zeros, so no 0 * NaN). mma.sync computes an output element from its own row of A and column of B
// alone, so the tile's other queries never touch it. A query's bits therefore depend only on its position and its
// sequence's data: not on the tile, the piece, the cut or the step (architecture.md, row invariance), and a prompt
// prefilled one row at a time equals the same prompt in one piece.
//
// Value slices. A step of few prefill rows over a long context (a decision's questions after a resumed 8K state, a
// chat turn after a cached 20K prompt) has few tiles: 383 rows are 96 blocks on 132 SMs, each walking every key block
// alone. Such a launch splits each tile's output dims over 2 or 4 blocks (blockIdx.z: dims [z DV, (z + 1) DV)); every
// one of them computes the tile's scores and softmax statistics in full, with the same operations, so m, l and p are
// the same bits in all, and an output dim's acc is the same chain of mma.sync steps over the same p and V column
// (each n-tile of 8 dims keeps its place in its 16-dim pair): the bits do not depend on the slices, only the work
// per block and the number of blocks do (AttentionKernels.ValueSlicesGiveIdenticalRows).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_shared.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/mma_sync.h"

namespace duet::backend::cuda::attention {

namespace {

constexpr int kThreads = 128;  // 4 warps x 16 queries
constexpr unsigned kAll = 0xffffffffu;

// Q, K and V tiles in shared memory: rows of D BF16 whose 16-byte chunks are permuted (chunk c of row r at
// c ^ (r % kSwizzle)), so the 8 rows one ldmatrix phase reads fall in distinct banks.
template <int D>
struct Tiles {
  static constexpr int kChunks = D / 8;
  static constexpr int kSwizzle = kChunks < 8 ? kChunks : 8;
  static constexpr int kTileBytes = kKeys * D * 2;  // 64 rows: the Q tile, a key block's K or V (or its slice)
  __device__ static int at(int row, int chunk) { return row * D + 8 * (chunk ^ (row % kSwizzle)); }
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The BF16 pair of two p values, and the pair of what rounding left of them.
__device__ __forceinline__ void split_bf16(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_bf16(__fsub_rn(p0, __low2float(h)), __fsub_rn(p1, __high2float(h)));
}

// Stages 64 rows of D keys or values of the key block at `src` (rows `stride` apart): rows [0, n) copied, the rest
// zeros. (A value slice stages DV of a row's dims: `src` then points at its first dim.)
template <int D>
__device__ __forceinline__ void stage_kv(bf16* dst, const bf16* src, int64_t stride, int n) {
  using T = Tiles<D>;
  for (int i = threadIdx.x; i < kKeys * T::kChunks; i += kThreads) {
    const int t = i / T::kChunks, c = i % T::kChunks;
    cp_async_16(dst + T::at(t, c), t < n ? src + t * stride + 8 * c : src, t < n ? 16u : 0u);
  }
}

// Shared memory of a block: the Q tile and a key block's K (D dims each) and V (the slice's DV dims).
template <int D, int DV>
constexpr int kPrefillBytes = 2 * Tiles<D>::kTileBytes + Tiles<DV>::kTileBytes;

// DV: the output dims this block computes (D, or a slice of D / 2 or D / 4 dims: blockIdx.z is the slice).
template <int D, int DV>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill_kernel(AttentionParams p) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  static_assert(D % 16 == 0 && D <= 256, "k-steps of 16 dims");
  static_assert(DV % 16 == 0 && D % DV == 0, "value slices of whole 16-dim pairs");
  using T = Tiles<D>;
  using TV = Tiles<DV>;
  constexpr int kDimTiles = DV / 8;  // n-tiles of 8 dims in this block's output
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = reinterpret_cast<bf16*>(smem + T::kTileBytes);
  bf16* vs = reinterpret_cast<bf16*>(smem + 2 * T::kTileBytes);
  const int first_dim = static_cast<int>(blockIdx.z) * DV;  // this block's output dims: first_dim .. + DV - 1

  // The heaviest tiles (a piece's last) are taken first.
  int piece_index, first_row, tile_rows;
  if (!find_tile(p, gridDim.x - 1 - blockIdx.x, &piece_index, &first_row, &tile_rows)) return;
  const DevicePiece piece = p.step.piece[piece_index];
  const int kvh = blockIdx.y, G = p.group, queries = tile_rows * G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t last_position = p.step.row_position[first_row + tile_rows - 1];

  // Query qi of the tile is head kvh * G + qi % G of row first_row + qi / G; unused queries are zeros.
  for (int i = threadIdx.x; i < kTileQueries * T::kChunks; i += kThreads) {
    const int qi = i / T::kChunks, c = i % T::kChunks;
    const bool used = qi < queries;
    const bf16* src = used ? query_ptr(p, first_row + qi / G, kvh * G + qi % G, D) + 8 * c : p.q_gate;
    cp_async_16(qs + T::at(qi, c), src, used ? 16u : 0u);
  }
  const int64_t stride = static_cast<int64_t>(p.kv_heads) * D;
  const int64_t value_offset = kv_page_elems(p.kv_heads, D) + first_dim;
  const bf16* first_key = kv_key(piece, p.step.page_table, p.layer, 0, kvh, p.kv_heads, D);
  stage_kv<D>(ks, first_key, stride, keys_in_block(last_position, 0));
  cp_async_commit();

  // This lane's two queries: rows g and g + 8 of the warp's 16 (an unused query takes the last position).
  const int qa = 16 * warp + lane / 4, qb = qa + 8;
  const int32_t pos_a = qa < queries ? p.step.row_position[first_row + qa / G] : last_position;
  const int32_t pos_b = qb < queries ? p.step.row_position[first_row + qb / G] : last_position;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  float acc[kDimTiles][4];
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  for (int block_start = 0; block_start <= last_position; block_start += kKeys) {
    const int n = keys_in_block(last_position, block_start);
    const bf16* key = kv_key(piece, p.step.page_table, p.layer, block_start, kvh, p.kv_heads, D);
    stage_kv<DV>(vs, key + value_offset, stride, n);
    cp_async_commit();
    cp_async_wait<1>();  // Q and this block's K are in
    __syncthreads();

    // Scores: s[j] holds keys 8j .. 8j + 7 of the block for the lane's two queries.
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, qs + T::at(16 * warp + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + T::at(16 * np + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
        mma_16x8x16(s[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_16x8x16(s[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }

    // Softmax statistics: scale and mask, the rows' maxima over their 4 lanes, p, the rows' sums.
    float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = block_start + 8 * j + 2 * (lane % 4) + e;
        s[j][e] = t <= pos_a ? __fmul_rn(s[j][e], p.scale) : -INFINITY;
        s[j][2 + e] = t <= pos_b ? __fmul_rn(s[j][2 + e], p.scale) : -INFINITY;
        max_a = fmaxf(max_a, s[j][e]);
        max_b = fmaxf(max_b, s[j][2 + e]);
      }
    }
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      max_a = fmaxf(max_a, __shfl_xor_sync(kAll, max_a, offset));
      max_b = fmaxf(max_b, __shfl_xor_sync(kAll, max_b, offset));
    }
    const float new_a = fmaxf(m_a, max_a), new_b = fmaxf(m_b, max_b);
    const float c_a = softmax_exp(__fsub_rn(m_a, new_a)), c_b = softmax_exp(__fsub_rn(m_b, new_b));
    m_a = new_a;
    m_b = new_b;
    float r_a = 0.0f, r_b = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = softmax_exp(__fsub_rn(s[j][e], m_a));
        s[j][2 + e] = softmax_exp(__fsub_rn(s[j][2 + e], m_b));
        r_a = __fadd_rn(r_a, s[j][e]);
        r_b = __fadd_rn(r_b, s[j][2 + e]);
      }
    }
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      r_a = __fadd_rn(r_a, __shfl_xor_sync(kAll, r_a, offset));
      r_b = __fadd_rn(r_b, __shfl_xor_sync(kAll, r_b, offset));
    }
    l_a = __fadd_rn(__fmul_rn(l_a, c_a), r_a);
    l_b = __fadd_rn(__fmul_rn(l_b, c_b), r_b);
#pragma unroll
    for (int i = 0; i < kDimTiles; ++i) {
      acc[i][0] = __fmul_rn(acc[i][0], c_a);
      acc[i][1] = __fmul_rn(acc[i][1], c_a);
      acc[i][2] = __fmul_rn(acc[i][2], c_b);
      acc[i][3] = __fmul_rn(acc[i][3], c_b);
    }

    __syncthreads();  // every warp is done with this block's K
    if (block_start + kKeys <= last_position) {
      const int next = block_start + kKeys;
      stage_kv<D>(ks, kv_key(piece, p.step.page_table, p.layer, next, kvh, p.kv_heads, D), stride,
                  keys_in_block(last_position, next));
    }
    cp_async_commit();
    cp_async_wait<1>();  // this block's V is in
    __syncthreads();

    // P.V: keys 16j .. 16j + 15 are the A operand (the score tiles 2j and 2j + 1 as they sit in registers).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t hi[4], lo[4];
      split_bf16(s[2 * j][0], s[2 * j][1], hi[0], lo[0]);
      split_bf16(s[2 * j][2], s[2 * j][3], hi[1], lo[1]);
      split_bf16(s[2 * j + 1][0], s[2 * j + 1][1], hi[2], lo[2]);
      split_bf16(s[2 * j + 1][2], s[2 * j + 1][3], hi[3], lo[3]);
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + TV::at(16 * j + ((lane / 8) % 2) * 8 + lane % 8, 2 * dp + lane / 16));
        mma_16x8x16(acc[2 * dp], hi[0], hi[1], hi[2], hi[3], b[0], b[1]);
        mma_16x8x16(acc[2 * dp], lo[0], lo[1], lo[2], lo[3], b[0], b[1]);
        mma_16x8x16(acc[2 * dp + 1], hi[0], hi[1], hi[2], hi[3], b[2], b[3]);
        mma_16x8x16(acc[2 * dp + 1], lo[0], lo[1], lo[2], lo[3], b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this block's V
  }

  // Out: the lane's two queries, dims 8i + 2 (lane % 4) and the next.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int qi = half == 0 ? qa : qb;
    if (qi >= queries) continue;
    const int row = first_row + qi / G, head = kvh * G + qi % G;
    const float l = half == 0 ? l_a : l_b;
    const bf16* gate = query_ptr(p, row, head, D) + D;
    bf16* out = p.out + (static_cast<int64_t>(row) * p.q_heads + head) * D;
#pragma unroll
    for (int i = 0; i < kDimTiles; ++i) {
      const int d = first_dim + 8 * i + 2 * (lane % 4);
      const __nv_bfloat162 g2 = *reinterpret_cast<const __nv_bfloat162*>(gate + d);
      __nv_bfloat162 y;
      y.x = __float2bfloat16(gated_output(acc[i][2 * half], l, __low2float(g2)));
      y.y = __float2bfloat16(gated_output(acc[i][2 * half + 1], l, __high2float(g2)));
      *reinterpret_cast<__nv_bfloat162*>(out + d) = y;
    }
  }
}

int value_slices_for_tests = 0;  // set_prefill_value_slices_for_tests

int multiprocessors() {
  static const int count = [] {
    int device = 0, n = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    return n;
  }();
  return count;
}

template <int D, int DV>
void launch_sliced(const AttentionParams& p, int tiles, cudaStream_t stream) {
  constexpr int kBytes = kPrefillBytes<D, DV>;
  static const bool configured =
      (allow_smem(attention_prefill_kernel<D, DV>, kBytes, "attention_prefill_kernel smem"), true);
  (void)configured;
  launch_dependent("attention_prefill_kernel", attention_prefill_kernel<D, DV>, dim3(tiles, p.kv_heads, D / DV),
                   kThreads, kBytes, stream, p);
  check_launch("attention_prefill_kernel");
}

template <int D>
void launch_for_head_dim(const AttentionParams& p, cudaStream_t stream) {
  // At most rows / tile_rows full tiles plus one partial tile per piece.
  const int tiles = (p.step.rows + p.tile_rows - 1) / p.tile_rows + p.step.pieces;
  // Value slices where the tiles would leave SMs idle: the fewest (1, 2, 4) that give two blocks an SM. Head dims
  // under 128 keep one (their blocks are short). Which one a launch takes changes no bit (see the top of the file).
  int slices = 1;
  if constexpr (D >= 128) {
    const int prefill_rows = p.step.decode_rows >= 0 ? p.step.rows - p.step.decode_rows : p.step.rows;
    const int blocks = ((prefill_rows + p.tile_rows - 1) / p.tile_rows + 1) * p.kv_heads,
              wanted = 2 * multiprocessors();
    slices = value_slices_for_tests > 0 ? value_slices_for_tests : blocks >= wanted ? 1 : 2 * blocks >= wanted ? 2 : 4;
  }
  switch (slices) {
    case 4:
      if constexpr (D >= 128) return launch_sliced<D, D / 4>(p, tiles, stream);
      [[fallthrough]];
    case 2:
      if constexpr (D >= 128) return launch_sliced<D, D / 2>(p, tiles, stream);
      [[fallthrough]];
    default:
      return launch_sliced<D, D>(p, tiles, stream);
  }
}

}  // namespace

void launch_prefill(const AttentionParams& p, int head_dim, cudaStream_t stream) {
  if (!has_prefill_rows(p.step)) return;
  switch (head_dim) {
    case 32:
      return launch_for_head_dim<32>(p, stream);
    case 64:
      return launch_for_head_dim<64>(p, stream);
    case 128:
      return launch_for_head_dim<128>(p, stream);
    default:
      return launch_for_head_dim<256>(p, stream);
  }
}

}  // namespace duet::backend::cuda::attention

namespace duet::backend::cuda {

void set_prefill_value_slices_for_tests(int slices) { attention::value_slices_for_tests = slices; }

}  // namespace duet::backend::cuda
