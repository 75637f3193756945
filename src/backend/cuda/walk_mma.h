#pragma once
// The chunked delta rule's walk (gdn_delta_rule.cu, chunk_state_kernel) for a WY chunk on the tensor cores: its four
// products as warp tiles of fp32 products in three TF32 passes (tf32_mma.h), where the FMA form runs each entry as one
// fma chain on the CUDA cores and is bound by the shared-memory loads that feed them (ncu, 45th round: 3 loads for 8
// to 16 fmas; an m16n8k8 step loads 6 values a lane for 3 x 1,024 products a warp). The products, for a chunk of rows
// [0, b) (b <= 64) with its state S_b (KD x VC columns of a column group):
//   P = [K; Q] S_b                  (128 x KD times KD x VC: S_b^T k_t and S_b^T q_t of every row)
//   d = X + T X                     (T strictly lower triangular, X_t = beta_t (v_t - e^{G_t} S_b^T k_t))
//   o = e^G (S_b^T q) + Q d         (Q lower triangular with its diagonal)
//   S_b' = e^{G_63} S_b + (K e^{G_63 - G})^T d   (when the chunk completes)
// Each output entry is a function of its own row and column operands in an order fixed by the chunk's shape alone
// (the k steps in order, three passes each), so a row's bits depend only on its chunk, as the FMA form's do; they are
// not the FMA form's bits (its own rows gate). Rows past b hold what earlier chunks left in shared memory: their
// products land only in rows that are never stored, and a product's operand past b is zero, since 0 x NaN would reach
// every row.
//
// Warps: w = threadIdx.x / 32 of a block of 16; lane g = lane / 4, t = lane % 4 (tf32_mma.h's fragments).
#include <cuda_runtime.h>

#include "backend/cuda/tf32_mma.h"

namespace duet::backend::cuda {

struct MmaLane {
  int g, t;
};
__device__ __forceinline__ MmaLane mma_lane() {
  const int lane = static_cast<int>(threadIdx.x % 32);
  return MmaLane{lane / 4, lane % 4};
}

// An accumulator entry's place in its 16 x 8 tile: entries 0, 1 in row g, 2, 3 in row g + 8; columns 2t, 2t + 1.
__device__ __forceinline__ int tile_row(const MmaLane& l, int e) { return e < 2 ? l.g : l.g + 8; }
__device__ __forceinline__ int tile_col(const MmaLane& l, int e) { return 2 * l.t + (e & 1); }

// acc[n] += V S over 16 rows of V (row-major, kVStride floats apart, from V's row 0 of the tile) and the 8-column tiles
// n0 + 8n of S (KD rows kSStride apart): the products S_b^T k and S_b^T q, the key index in steps of 8.
template <int kPasses, int KD, int kVStride, int kSStride, int kNTiles>
__device__ __forceinline__ void rows_times_state(const float* V, const float* S, int n0, float (&acc)[kNTiles][4]) {
  const MmaLane l = mma_lane();
#pragma unroll 4
  for (int i0 = 0; i0 < KD; i0 += 8) {
    const float a[4] = {V[l.g * kVStride + i0 + l.t], V[(l.g + 8) * kVStride + i0 + l.t],
                        V[l.g * kVStride + i0 + l.t + 4], V[(l.g + 8) * kVStride + i0 + l.t + 4]};
    const Tf32Split<4> as = split_tf32<kPasses>(a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const int col = n0 + 8 * n + l.g;
      const float b[2] = {S[(i0 + l.t) * kSStride + col], S[(i0 + l.t + 4) * kSStride + col]};
      mma_fp32_16x8x8<kPasses>(acc[n], as, split_tf32<kPasses>(b));
    }
  }
}

// acc[n] += L B over a lower-triangular L (row-major, kLStride floats apart; rows t0.. of the tile) and the column
// tiles n0 + 8n of B (rows kBStride apart): L[r][s] for s < r (kInclusive: s <= r), B's rows s < b. The steps over s
// stop at the tile's diagonal.
template <int kPasses, bool kInclusive, int kLStride, int kBStride, int kNTiles>
__device__ __forceinline__ void lower_times(const float* L, int t0, const float* B, int n0, int b,
                                            float (&acc)[kNTiles][4]) {
  const MmaLane l = mma_lane();
  const int r0 = t0 + l.g, r1 = r0 + 8, end = min(t0 + 16, b);
  auto entry = [&](int r, int s) {
    const bool in = kInclusive ? s <= r : s < r;
    return in ? L[(r - t0) * kLStride + s] : 0.0f;
  };
  for (int s0 = 0; s0 < end; s0 += 8) {
    const int sa = s0 + l.t, sb = sa + 4;
    const float a[4] = {entry(r0, sa), entry(r1, sa), entry(r0, sb), entry(r1, sb)};
    const Tf32Split<4> as = split_tf32<kPasses>(a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const int col = n0 + 8 * n + l.g;
      const float bv[2] = {sa < b ? B[sa * kBStride + col] : 0.0f, sb < b ? B[sb * kBStride + col] : 0.0f};
      mma_fp32_16x8x8<kPasses>(acc[n], as, split_tf32<kPasses>(bv));
    }
  }
}

// acc[n] += (K e^{G_63 - G})^T d for rows m0.. of the fold (key indices) and the column tiles n0 + 8n: K the chunk's
// 64 keys (key s in row s, kKStride floats apart), decay[s] = e^{G_63 - G_s}, d in u (rows kUStride apart), the rows s
// in steps of 8.
template <int kPasses, int kKStride, int kUStride, int kNTiles>
__device__ __forceinline__ void fold_products(const float* K, int m0, const float* decay, const float* u, int n0,
                                              float (&acc)[kNTiles][4]) {
  const MmaLane l = mma_lane();
#pragma unroll 2
  for (int s0 = 0; s0 < 64; s0 += 8) {
    const int sa = s0 + l.t, sb = sa + 4;
    const float ea = decay[sa], eb = decay[sb];
    const float a[4] = {K[sa * kKStride + m0 + l.g] * ea, K[sa * kKStride + m0 + l.g + 8] * ea,
                        K[sb * kKStride + m0 + l.g] * eb, K[sb * kKStride + m0 + l.g + 8] * eb};
    const Tf32Split<4> as = split_tf32<kPasses>(a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const int col = n0 + 8 * n + l.g;
      const float bv[2] = {u[sa * kUStride + col], u[sb * kUStride + col]};
      mma_fp32_16x8x8<kPasses>(acc[n], as, split_tf32<kPasses>(bv));
    }
  }
}

}  // namespace duet::backend::cuda
