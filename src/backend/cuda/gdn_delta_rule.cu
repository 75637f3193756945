// The gated delta rule of a GDN layer (launch_gdn_delta_rule in kernels.h), in its per-token form.
//
// One block per (piece, value head). Column j of the head's state S [key_dim, value_dim] (value index j) lives in
// registers for the whole piece, split over kSplit adjacent lanes (each holds key_dim / kSplit of its rows), so a
// token needs no block-wide synchronisation: each lane decays its part of the column and reads its part of
// s_j = sum_i S[i][j] k[i]; the lanes of a column combine their parts with a shuffle, apply the correction d_j to
// their rows and read o_j = sum_i S[i][j] q[i] the same way. key_dim 128 is split over two lanes because one thread
// holding 128 state values (plus the k values the compiler keeps for the second pass) needs more than 255 registers
// and spills. The rows are staged into shared memory kChunk at a time, q and k l2-normalized there by one warp per
// vector.
//
// Row invariance: every reduction (the l2 norms and the two reads of S) runs in a fixed order that depends only on
// key_dim, and a block only ever reads its own piece's rows and state. Because the state between tokens is the
// exact fp32 S, a piece cut anywhere and run over several steps gives the same bits as the piece run whole.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kChunk = 16;       // rows staged in shared memory at a time (24 KiB at key_dim = value_dim = 128)
constexpr float kL2Eps = 1e-6f;  // inside the rsqrt of q's and k's sum of squares, as transformers' l2norm

// A chunk of a piece's rows for one value head, in fp32: q (normalized and scaled), k (normalized), v, g, beta.
template <int KD, int VD>
struct alignas(16) StagedRows {
  float q[kChunk][KD];
  float k[kChunk][KD];
  float v[kChunk][VD];
  float g[kChunk];
  float beta[kChunk];
};

// Where one value head's inputs sit in a row of qkv [q (key_heads * KD) | k (key_heads * KD) | v (value_heads * VD)].
struct HeadLayout {
  int64_t width;  // elements per qkv row
  int32_t q;      // offset of this head's key head in the q block
  int32_t k;      // offset of this head's key head in the k block
  int32_t v;      // offset of this value head in the v block
  int32_t head;   // value head
  int32_t heads;  // value heads (stride of beta and g)
  float q_scale;  // key_dim^-0.5
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
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

// Stages rows [row0, row0 + n) of the step for this head. The caller synchronises before and after.
template <int KD, int VD>
__device__ void stage_rows(const bf16* qkv, const float* beta, const float* g, const HeadLayout& layout, int32_t row0,
                           int32_t n, StagedRows<KD, VD>& staged) {
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int vec = warp; vec < 2 * n; vec += warps) {  // even: the row's q, odd: its k
    const int32_t r = vec / 2;
    const bool is_key = vec % 2 == 1;
    const bf16* row = qkv + static_cast<int64_t>(row0 + r) * layout.width;
    l2_normalize_to<KD>(row + (is_key ? layout.k : layout.q), layout.q_scale, !is_key,
                        is_key ? staged.k[r] : staged.q[r]);
  }
  for (int idx = threadIdx.x; idx < n * VD; idx += blockDim.x) {
    const int32_t r = idx / VD, j = idx % VD;
    staged.v[r][j] = __bfloat162float(qkv[static_cast<int64_t>(row0 + r) * layout.width + layout.v + j]);
  }
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    const int64_t at = static_cast<int64_t>(row0 + r) * layout.heads + layout.head;
    staged.g[r] = g[at];
    staged.beta[r] = beta[at];
  }
}

// Lanes per state column: key_dim 128 is split in two (see the top of the file); smaller key dims fit one thread.
constexpr int split_for(int key_dim) { return key_dim > 64 ? 2 : 1; }
// At least a full warp, so the warp-level l2 reductions never run on a partial warp (value_dim 16).
constexpr int threads_for(int key_dim, int value_dim) {
  return value_dim * split_for(key_dim) < 32 ? 32 : value_dim * split_for(key_dim);
}

// Sum of a column's parts over its kSplit adjacent lanes. Each butterfly step adds the same two values on both
// lanes (a + b and b + a are the same bits), so every lane of the column ends with identical bits.
template <int kSplit>
__device__ __forceinline__ float column_sum(float part) {
#pragma unroll
  for (int offset = kSplit / 2; offset > 0; offset >>= 1) part += __shfl_xor_sync(0xffffffffu, part, offset);
  return part;
}

// One token on this lane's R rows of a column of S (q, k: the same R rows of the token's vectors): S *= exp(g);
// d = (v - S^T k) * beta; S += k d; returns S^T q. Four accumulators in a fixed pattern shorten the dependent FMA
// chains without making the order depend on anything but R.
template <int R, int kSplit>
__device__ __forceinline__ float token_step(float (&s)[R], const float* q, const float* k, float v, float decay,
                                            float beta) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < R; i += 4) {
    const float4 k4 = *reinterpret_cast<const float4*>(k + i);
    const float kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[i + e] *= decay;
      acc[e] = fmaf(s[i + e], kk[e], acc[e]);
    }
  }
  const float read = column_sum<kSplit>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  const float d = (v - read) * beta;
  float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < R; i += 4) {
    const float4 k4 = *reinterpret_cast<const float4*>(k + i);
    const float4 q4 = *reinterpret_cast<const float4*>(q + i);
    const float kk[4] = {k4.x, k4.y, k4.z, k4.w};
    const float qq[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[i + e] = fmaf(kk[e], d, s[i + e]);
      out[e] = fmaf(s[i + e], qq[e], out[e]);
    }
  }
  return column_sum<kSplit>((out[0] + out[1]) + (out[2] + out[3]));
}

template <int KD, int VD>
__global__ void __launch_bounds__(threads_for(KD, VD))
    delta_rule_kernel(DeviceStep step, int32_t layer, const bf16* qkv, const float* beta, const float* g, GdnDims dims,
                      float q_scale, float* out) {
  constexpr int kSplit = split_for(KD);
  constexpr int R = KD / kSplit;  // state rows per lane
  __shared__ StagedRows<KD, VD> staged;
  const DevicePiece& piece = step.piece[blockIdx.x];
  const int32_t head = blockIdx.y;
  const int32_t key_head = head / (dims.value_heads / dims.key_heads);
  const int32_t key_width = dims.key_heads * KD;
  const HeadLayout layout{2 * key_width + dims.value_heads * VD,
                          key_head * KD,
                          key_width + key_head * KD,
                          2 * key_width + head * VD,
                          head,
                          dims.value_heads,
                          q_scale};
  const int j = threadIdx.x / kSplit;            // the column (value index)
  const int first = (threadIdx.x % kSplit) * R;  // this lane's first state row (key index)
  const bool owns_column = j < VD;               // false only for the padding lanes of value_dim 16
  float* state = piece.delta + static_cast<int64_t>(layer) * piece.delta_layer_stride +
                 static_cast<int64_t>(head) * KD * VD + static_cast<int64_t>(first) * VD + j;
  const int32_t first_row = piece.first_row, rows = piece.rows;

  float s[R];
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = owns_column ? state[i * VD] : 0.0f;

  float* head_out = out + static_cast<int64_t>(head) * VD + j;
  const int64_t out_stride = static_cast<int64_t>(dims.value_heads) * VD;
  for (int32_t base = 0; base < rows; base += kChunk) {
    const int32_t n = min(kChunk, rows - base);
    __syncthreads();  // the previous chunk's rows are no longer read
    stage_rows<KD, VD>(qkv, beta, g, layout, first_row + base, n, staged);
    __syncthreads();
    // Padding lanes exist only when kSplit is 1, so no shuffle in token_step waits for them.
    if (!owns_column) continue;
    for (int32_t t = 0; t < n; ++t) {
      const float o = token_step<R, kSplit>(s, staged.q[t] + first, staged.k[t] + first, staged.v[t][j],
                                            expf(staged.g[t]), staged.beta[t]);
      if (first == 0) head_out[static_cast<int64_t>(first_row + base + t) * out_stride] = o;
    }
  }

  if (!owns_column) return;
#pragma unroll
  for (int i = 0; i < R; ++i) state[i * VD] = s[i];
}

template <int KD, int VD>
void launch_delta(const DeviceStep& step, int32_t layer, const bf16* qkv, const float* beta, const float* g,
                  GdnDims dims, float* out, cudaStream_t stream) {
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(KD)));
  const dim3 grid(step.pieces, dims.value_heads);
  delta_rule_kernel<KD, VD><<<grid, threads_for(KD, VD), 0, stream>>>(step, layer, qkv, beta, g, dims, q_scale, out);
  check_launch("gdn delta_rule_kernel");
}

template <int KD>
void launch_for_value_dim(const DeviceStep& step, int32_t layer, const bf16* qkv, const float* beta, const float* g,
                          GdnDims dims, float* out, cudaStream_t stream) {
  switch (dims.value_dim) {
    case 16:
      return launch_delta<KD, 16>(step, layer, qkv, beta, g, dims, out, stream);
    case 32:
      return launch_delta<KD, 32>(step, layer, qkv, beta, g, dims, out, stream);
    case 64:
      return launch_delta<KD, 64>(step, layer, qkv, beta, g, dims, out, stream);
    case 128:
      return launch_delta<KD, 128>(step, layer, qkv, beta, g, dims, out, stream);
    default:
      check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: value_dim must be 16, 32, 64 or 128");
  }
}

}  // namespace

void launch_gdn_delta_rule(const DeviceStep& step, int32_t gdn_layer, const bf16* qkv, const float* beta,
                           const float* g, GdnDims dims, float* out, cudaStream_t stream) {
  if (dims.key_heads <= 0 || dims.value_heads <= 0 || dims.value_heads % dims.key_heads != 0)
    check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: value_heads must be a multiple of key_heads");
  if (step.pieces <= 0) return;
  switch (dims.key_dim) {
    case 16:
      return launch_for_value_dim<16>(step, gdn_layer, qkv, beta, g, dims, out, stream);
    case 32:
      return launch_for_value_dim<32>(step, gdn_layer, qkv, beta, g, dims, out, stream);
    case 64:
      return launch_for_value_dim<64>(step, gdn_layer, qkv, beta, g, dims, out, stream);
    case 128:
      return launch_for_value_dim<128>(step, gdn_layer, qkv, beta, g, dims, out, stream);
    default:
      check_cuda(cudaErrorInvalidValue, "launch_gdn_delta_rule: key_dim must be 16, 32, 64 or 128");
  }
}

}  // namespace duet::backend::cuda
