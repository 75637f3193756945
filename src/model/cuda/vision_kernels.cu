// The vision tower's kernels (vision_kernels.h). Where the host tower (model/vision_tower.cc, vision_positions.cc)
// rounds in a given order, the elementwise kernels use the same operations without contraction (__fmul_rn, __fadd_rn),
// so the two differ only where the device must sum in another order (GEMMs, LayerNorm statistics, softmax sums).
#include "model/cuda/vision_kernels.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace duet::model::cuda {

using backend::cuda::check_launch;

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerNormBlock = kThreads / 32;  // a warp per row

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// The warp's sum in one fixed order (a butterfly): every lane gets the same value.
__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void round_to_bf16_kernel(const float* x, int64_t n, bf16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

// One warp per row: each lane sums its columns in order, then the butterfly; the mean first, then the squares about
// it (two passes, as torch's fp32 LayerNorm statistics).
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, int64_t rows, int32_t width, const float* weight, const float* bias, float eps,
                      bf16* out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerNormBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float* in = x + row * width;
  float sum = 0;
  for (int32_t i = lane; i < width; i += 32) sum = __fadd_rn(sum, in[i]);
  const float mean = __fdiv_rn(warp_sum(sum), static_cast<float>(width));
  float squares = 0;
  for (int32_t i = lane; i < width; i += 32) {
    const float d = __fsub_rn(in[i], mean);
    squares = __fadd_rn(squares, __fmul_rn(d, d));
  }
  const float variance = __fdiv_rn(warp_sum(squares), static_cast<float>(width));
  const float inverse = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
  bf16* y = out + row * width;
  for (int32_t i = lane; i < width; i += 32)
    y[i] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(in[i], mean), inverse), weight[i]), bias[i]));
}

__global__ void add_bias_kernel(float* y, int64_t n, int32_t width, const float* bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(y[i], bias[i % width]);
}

__global__ void add_bias_residual_kernel(float* x, const float* y, int64_t n, int32_t width, const float* bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], __fadd_rn(y[i], bias[i % width]));
}

// gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in the host tower's order.
__device__ float gelu_tanh(float x) {
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kappa, x), x), x);
  const float inner = __fmul_rn(beta, __fadd_rn(x, cube));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}
// nn.GELU(): x / 2 (1 + erf(x / sqrt 2)).
__device__ float gelu_erf(float x) {
  return __fmul_rn(__fmul_rn(x, 0.5f), __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752f))));
}

__global__ void bias_gelu_kernel(const float* y, int64_t n, int32_t width, const float* bias, Gelu gelu, bf16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const float v = __fadd_rn(y[i], bias[i % width]);
  out[i] = __float2bfloat16_rn(gelu == Gelu::tanh ? gelu_tanh(v) : gelu_erf(v));
}

__global__ void add_positions_kernel(float* x, int64_t n, int32_t width, const float* table, const int32_t* index,
                                     const float* weight) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const int64_t p = i / width, j = i % width;
  const int32_t* at = index + 4 * p;
  const float* w = weight + 4 * p;
  auto tap = [&](int k) { return __fmul_rn(table[static_cast<int64_t>(at[k]) * width + j], w[k]); };
  const float pos = __fadd_rn(__fadd_rn(__fadd_rn(tap(0), tap(1)), tap(2)), tap(3));
  x[i] = __fadd_rn(x[i], pos);
}

// One thread per pair (c, c + head_dim / 2) of a head of q, k or v.
__global__ void qkv_bias_rotary_kernel(float* qkv, int64_t pairs, int32_t hidden, int32_t head_dim, const float* bias,
                                       const float* cos, const float* sin) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= pairs) return;
  const int32_t half = head_dim / 2, per_part = hidden / 2;
  const int64_t row = i / (3 * per_part);
  const auto rest = static_cast<int32_t>(i % (3 * per_part));
  const int32_t part = rest / per_part, head = rest % per_part / half, p = rest % per_part % half;
  const int32_t c0 = part * hidden + head * head_dim + p, c1 = c0 + half;
  float* x = qkv + row * 3 * hidden;
  const float a = __fadd_rn(x[c0], bias[c0]), b = __fadd_rn(x[c1], bias[c1]);
  if (part == 2) {  // v: the bias alone
    x[c0] = a;
    x[c1] = b;
    return;
  }
  const float* cs = cos + row * head_dim;
  const float* sn = sin + row * head_dim;
  x[c0] = __fadd_rn(__fmul_rn(a, cs[p]), __fmul_rn(-b, sn[p]));
  x[c1] = __fadd_rn(__fmul_rn(b, cs[p + half]), __fmul_rn(a, sn[p + half]));
}

// Attention: two threads per query of one head, each holding half of its q and of its output sums in registers (a
// whole head's were too many registers at 72); the frame's keys and values staged kKeyTile at a time in shared memory
// (float4s, read by every thread) and walked in order. Per tile: the scores (each half's dot in order, then the two
// halves added, the same sum on both threads), the running max raised to the tile's, the sums rescaled by
// exp(old max - new max), then sum p v. Keys past the frame's end score -inf and weigh 0 (their staged values are
// zeros).
constexpr int kQueryTile = 64;
constexpr int kKeyTile = 32;
constexpr int kAttentionThreads = 2 * kQueryTile;

template <int D>
__global__ void __launch_bounds__(kAttentionThreads)
    frame_attention_kernel(const float* qkv, int64_t frame_rows, int32_t hidden, float scale, bf16* out) {
  static_assert(D % 8 == 0, "float4 loads of each half");
  constexpr int kVectors = D / 4, kHalf = D / 2, kHalfVectors = kVectors / 2;
  __shared__ float4 keys[kKeyTile][kVectors];
  __shared__ float4 values[kKeyTile][kVectors];
  const int64_t first = static_cast<int64_t>(blockIdx.z) * frame_rows;  // the frame's first row
  const int64_t query = static_cast<int64_t>(blockIdx.x) * kQueryTile + threadIdx.x / 2;
  const int half = static_cast<int>(threadIdx.x % 2);
  const bool active = query < frame_rows;
  const int64_t stride = 3 * static_cast<int64_t>(hidden);
  const int64_t q_column = static_cast<int64_t>(blockIdx.y) * D, k_column = hidden + q_column,
                v_column = 2 * static_cast<int64_t>(hidden) + q_column;

  float q[kHalf], acc[kHalf];
  const auto* q_row =
      reinterpret_cast<const float4*>(qkv + (first + (active ? query : 0)) * stride + q_column + half * kHalf);
#pragma unroll
  for (int c = 0; c < kHalfVectors; ++c) {
    const float4 v = q_row[c];
    q[4 * c] = v.x, q[4 * c + 1] = v.y, q[4 * c + 2] = v.z, q[4 * c + 3] = v.w;
  }
#pragma unroll
  for (int c = 0; c < kHalf; ++c) acc[c] = 0.0f;
  float top = -INFINITY, total = 0.0f;

  for (int64_t key0 = 0; key0 < frame_rows; key0 += kKeyTile) {
    const auto count = static_cast<int>(frame_rows - key0 < kKeyTile ? frame_rows - key0 : kKeyTile);
    __syncthreads();  // the previous tile's readers are done
    for (int i = threadIdx.x; i < kKeyTile * kVectors; i += kAttentionThreads) {
      const int j = i / kVectors, c = i % kVectors;
      float4 k = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v = k;
      if (j < count) {
        const float* row = qkv + (first + key0 + j) * stride;
        k = reinterpret_cast<const float4*>(row + k_column)[c];
        v = reinterpret_cast<const float4*>(row + v_column)[c];
      }
      keys[j][c] = k;
      values[j][c] = v;
    }
    __syncthreads();

    float s[kKeyTile];
    float tile_top = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kHalfVectors; ++c) {
        const float4 k = keys[j][half * kHalfVectors + c];
        dot = fmaf(q[4 * c], k.x, dot);
        dot = fmaf(q[4 * c + 1], k.y, dot);
        dot = fmaf(q[4 * c + 2], k.z, dot);
        dot = fmaf(q[4 * c + 3], k.w, dot);
      }
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // + the other half's: the same sum on both threads
      s[j] = j < count ? dot * scale : -INFINITY;
      tile_top = fmaxf(tile_top, s[j]);
    }
    const float new_top = fmaxf(top, tile_top);
    const float keep = expf(top - new_top);  // 0 on the first tile (top = -inf)
    total *= keep;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) acc[c] *= keep;
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      const float p = expf(s[j] - new_top);
      total += p;
#pragma unroll
      for (int c = 0; c < kHalfVectors; ++c) {
        const float4 v = values[j][half * kHalfVectors + c];
        acc[4 * c] = fmaf(p, v.x, acc[4 * c]);
        acc[4 * c + 1] = fmaf(p, v.y, acc[4 * c + 1]);
        acc[4 * c + 2] = fmaf(p, v.z, acc[4 * c + 2]);
        acc[4 * c + 3] = fmaf(p, v.w, acc[4 * c + 3]);
      }
    }
    top = new_top;
  }
  if (!active) return;
  const float inverse = 1.0f / total;
  auto* o = reinterpret_cast<__nv_bfloat162*>(out + (first + query) * hidden + q_column + half * kHalf);
#pragma unroll
  for (int c = 0; c < kHalf / 2; ++c) o[c] = __floats2bfloat162_rn(acc[2 * c] * inverse, acc[2 * c + 1] * inverse);
}

template <int D>
void launch_frame_attention_of(const float* qkv, int64_t frames, int64_t frame_rows, int32_t heads, int32_t hidden,
                               float scale, bf16* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((frame_rows + kQueryTile - 1) / kQueryTile), static_cast<unsigned>(heads),
                  static_cast<unsigned>(frames));
  frame_attention_kernel<D><<<grid, kAttentionThreads, 0, stream>>>(qkv, frame_rows, hidden, scale, out);
}

}  // namespace

void launch_round_to_bf16(const float* x, int64_t n, bf16* out, cudaStream_t stream) {
  if (n <= 0) return;
  round_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, out);
  check_launch("vision round_to_bf16");
}

void launch_layer_norm(const float* x, int64_t rows, int32_t width, const float* weight, const float* bias, float eps,
                       bf16* out, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto blocks = static_cast<unsigned>((rows + kRowsPerNormBlock - 1) / kRowsPerNormBlock);
  layer_norm_kernel<<<blocks, kThreads, 0, stream>>>(x, rows, width, weight, bias, eps, out);
  check_launch("vision layer_norm");
}

void launch_add_bias(float* y, int64_t rows, int32_t width, const float* bias, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0) return;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, width, bias);
  check_launch("vision add_bias");
}

void launch_add_bias_residual(float* x, const float* y, int64_t rows, int32_t width, const float* bias,
                              cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0) return;
  add_bias_residual_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, width, bias);
  check_launch("vision add_bias_residual");
}

void launch_bias_gelu(const float* y, int64_t rows, int32_t width, const float* bias, Gelu gelu, bf16* out,
                      cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0) return;
  bias_gelu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, width, bias, gelu, out);
  check_launch("vision bias_gelu");
}

void launch_add_positions(float* x, int64_t rows, int32_t width, const float* table, const int32_t* index,
                          const float* weight, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0) return;
  add_positions_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, width, table, index, weight);
  check_launch("vision add_positions");
}

void launch_qkv_bias_rotary(float* qkv, int64_t rows, int32_t hidden, int32_t head_dim, const float* bias,
                            const float* cos, const float* sin, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || hidden % head_dim != 0)
    throw std::invalid_argument("vision qkv_bias_rotary: head_dim " + std::to_string(head_dim) +
                                " must be even and divide hidden " + std::to_string(hidden));
  const int64_t pairs = rows * 3 * (hidden / 2);
  if (pairs <= 0) return;
  qkv_bias_rotary_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(qkv, pairs, hidden, head_dim, bias, cos, sin);
  check_launch("vision qkv_bias_rotary");
}

bool frame_attention_supports(int32_t head_dim) {
  switch (head_dim) {
    case 16:
    case 32:
    case 64:
    case 72:
    case 80:
      return true;
    default:
      return false;
  }
}

void launch_frame_attention(const float* qkv, int64_t rows, int64_t frame_rows, int32_t heads, int32_t head_dim,
                            float scale, bf16* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (frame_rows <= 0 || rows % frame_rows != 0 || rows / frame_rows > 65535)
    throw std::invalid_argument("vision attention: " + std::to_string(rows) + " rows are not whole frames of " +
                                std::to_string(frame_rows) + " (at most 65535 frames)");
  const int64_t frames = rows / frame_rows;
  const int32_t hidden = heads * head_dim;
  switch (head_dim) {
    case 16:
      launch_frame_attention_of<16>(qkv, frames, frame_rows, heads, hidden, scale, out, stream);
      break;
    case 32:
      launch_frame_attention_of<32>(qkv, frames, frame_rows, heads, hidden, scale, out, stream);
      break;
    case 64:
      launch_frame_attention_of<64>(qkv, frames, frame_rows, heads, hidden, scale, out, stream);
      break;
    case 72:
      launch_frame_attention_of<72>(qkv, frames, frame_rows, heads, hidden, scale, out, stream);
      break;
    case 80:
      launch_frame_attention_of<80>(qkv, frames, frame_rows, heads, hidden, scale, out, stream);
      break;
    default:
      throw std::invalid_argument("vision attention: head_dim " + std::to_string(head_dim) + " is not compiled");
  }
  check_launch("vision frame_attention");
}

}  // namespace duet::model::cuda
