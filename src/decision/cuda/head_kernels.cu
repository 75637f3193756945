// The joint head's kernels (head_kernels.h). Where the host head (decision/head_math.cc, head_forward.cc) rounds
// in a given order, these use the same operations without contraction (__fmul_rn, __fadd_rn) so that the two stay
// within a few ulps of each other; sums the host takes in double are taken in double, in a fixed order per launch
// shape (a block's tree reduction never depends on what else runs).
#include "decision/cuda/head_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace duet::decision::cuda {

using backend::cuda::check_cuda;
using backend::cuda::check_launch;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 8;               // keys a warp loads at once in the head's attention
constexpr float kLayerNormEps = 1e-5f;  // decision/head_math.h

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The block's sum, the same on every thread, in one fixed order: warps by shuffles, then the warps' sums in order.
// `shared` holds kWarps values; the first barrier lets a previous call's readers finish before it is written.
__device__ double block_sum(double v, double* shared) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < kWarps; ++i) total += shared[i];
  return total;
}
__device__ float block_max(float v, float* shared) {
  v = warp_max(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float top = shared[0];
  for (int i = 1; i < kWarps; ++i) top = fmaxf(top, shared[i]);
  return top;
}

__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, int32_t width, const float* weight, const float* bias, float* out) {
  __shared__ double shared[kWarps];
  const float* in = x + static_cast<int64_t>(blockIdx.x) * width;
  float* y = out + static_cast<int64_t>(blockIdx.x) * width;
  double sum = 0;
  for (int32_t i = threadIdx.x; i < width; i += kThreads) sum += in[i];
  const double mean = block_sum(sum, shared) / width;
  double squares = 0;
  for (int32_t i = threadIdx.x; i < width; i += kThreads) {
    const double d = in[i] - mean;
    squares += d * d;
  }
  const double variance = block_sum(squares, shared) / width;
  const auto inverse = static_cast<float>(1.0 / sqrt(variance + static_cast<double>(kLayerNormEps)));
  const auto mean_f = static_cast<float>(mean);
  // Each thread writes only what it read itself, after both sums: x and out may alias.
  for (int32_t i = threadIdx.x; i < width; i += kThreads)
    y[i] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(in[i], mean_f), inverse), weight[i]), bias[i]);
}

__global__ void bias_gelu_kernel(float* y, int64_t n, int32_t width, const float* bias, bool gelu) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  float v = y[i];
  if (bias != nullptr) v = __fadd_rn(v, bias[i % width]);
  if (gelu) v = __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, erff(__fmul_rn(v, static_cast<float>(M_SQRT1_2)))));
  y[i] = v;
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void gather_kernel(const float* x, int32_t width, const int32_t* index, int32_t count, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(count) * width) return;
  const int64_t row = i / width, c = i % width;
  out[i] = x[static_cast<int64_t>(index[row]) * width + c];
}

// One block per (query, head). Pass 1: the warps take keys j = warp, warp + 8, ... (a lane holds up to 4 of the head's
// columns), each score a warp-wide dot, kept in shared memory; the block's max. Pass 2: p_j = exp(s_j - max), the
// sum of p in double, and sum_j p_j v_j per column; the warps' partials are added in warp order and scaled by the
// inverse sum (the host normalises p first: the same value up to rounding).
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* q, const float* k, const float* v, int32_t nm, int32_t width, int32_t d, float* out) {
  extern __shared__ float scores[];  // [nm]
  __shared__ float partial[kWarps][kMaxHeadDim];
  __shared__ double shared_sum[kWarps];
  __shared__ float shared_max[kWarps];
  const int query = blockIdx.x, head = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t column0 = static_cast<int64_t>(head) * d;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  float qv[kMaxHeadDim / 32];
#pragma unroll
  for (int t = 0; t < kMaxHeadDim / 32; ++t) {
    const int c = lane + 32 * t;
    qv[t] = c < d ? q[static_cast<int64_t>(query) * width + column0 + c] : 0.0f;
  }
  // Both passes load kBatch keys' (or values') columns before using any: a warp that walked its keys one at a time
  // waited out an L2 round trip per key (at 16K memory rows and 136 options the routing's attention was latency-bound,
  // docs/benchmarks.md). The arithmetic and its order per key are as they were.
  constexpr int kColumns = kMaxHeadDim / 32;
  float top = -INFINITY;
  for (int32_t j0 = warp; j0 < nm; j0 += kWarps * kBatch) {
    float kv[kBatch][kColumns];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int32_t j = j0 + b * kWarps;
      const float* kj = k + static_cast<int64_t>(j) * width + column0;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int c = lane + 32 * t;
        kv[b][t] = j < nm && c < d ? kj[c] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int32_t j = j0 + b * kWarps;
      if (j >= nm) break;  // the same for every lane of the warp
      float dot = 0;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int c = lane + 32 * t;
        if (c < d) dot += qv[t] * kv[b][t];
      }
      const float s = warp_sum(dot) * scale;
      if (lane == 0) scores[j] = s;
      top = fmaxf(top, s);
    }
  }
  top = block_max(top, shared_max);  // its barriers also publish the scores
  double sum = 0;
  float acc[kColumns] = {};
  for (int32_t j0 = warp; j0 < nm; j0 += kWarps * kBatch) {
    float vv[kBatch][kColumns];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int32_t j = j0 + b * kWarps;
      const float* vj = v + static_cast<int64_t>(j) * width + column0;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int c = lane + 32 * t;
        vv[b][t] = j < nm && c < d ? vj[c] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int32_t j = j0 + b * kWarps;
      if (j >= nm) break;
      const float p = expf(scores[j] - top);
      sum += p;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int c = lane + 32 * t;
        if (c < d) acc[t] += p * vv[b][t];
      }
    }
  }
  if (lane == 0) shared_sum[warp] = sum;  // every lane of a warp holds the same sum
#pragma unroll
  for (int t = 0; t < kMaxHeadDim / 32; ++t) {
    const int c = lane + 32 * t;
    if (c < d) partial[warp][c] = acc[t];
  }
  __syncthreads();
  double total = 0;
  for (int i = 0; i < kWarps; ++i) total += shared_sum[i];
  const auto inverse = static_cast<float>(1.0 / total);
  for (int c = threadIdx.x; c < d; c += kThreads) {
    float value = 0;
    for (int i = 0; i < kWarps; ++i) value += partial[i][c];
    out[static_cast<int64_t>(query) * width + column0 + c] = value * inverse;
  }
}

// A thread per column walks the chunk's rows in position order, carrying the running sum of the span it is in in a
// register: sum = sum + row, row by row, as the host adds them, whatever the chunk boundaries.
__global__ void span_sums_kernel(const float* normed, int32_t count, int32_t hidden, const int32_t* span_at,
                                 int64_t first, double* sums) {
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= hidden) return;
  int32_t current = -1;
  double running = 0;
  for (int32_t r = 0; r < count; ++r) {
    const int32_t span = span_at[first + r];
    if (span != current) {
      if (current >= 0) sums[static_cast<int64_t>(current) * hidden + c] = running;
      current = span;
      if (current >= 0) running = sums[static_cast<int64_t>(current) * hidden + c];
    }
    if (current >= 0) running += normed[static_cast<int64_t>(r) * hidden + c];
  }
  if (current >= 0) sums[static_cast<int64_t>(current) * hidden + c] = running;
}

__global__ void span_means_kernel(const double* sums, const int32_t* sizes, int32_t spans, int32_t hidden,
                                  float* means) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(spans) * hidden) return;
  means[i] = static_cast<float>(sums[i] / sizes[i / hidden]);
}

// One block per question; `scores` [N] is scratch for its options' weights.
__global__ void __launch_bounds__(kThreads)
    question_summaries_kernel(const float* r, const float* b, const int32_t* first, int32_t width, float* scores,
                              float* summaries) {
  __shared__ double shared[kWarps];
  const int32_t question = blockIdx.x, begin = first[question], end = first[question + 1];
  const float* bi = b + static_cast<int64_t>(question) * width;
  const float scale = 1.0f / sqrtf(static_cast<float>(width));
  for (int32_t o = begin; o < end; ++o) {
    double dot = 0;
    for (int32_t c = threadIdx.x; c < width; c += kThreads)
      dot += static_cast<double>(r[static_cast<int64_t>(o) * width + c]) * bi[c];
    const double total = block_sum(dot, shared);
    if (threadIdx.x == 0) scores[o] = __fmul_rn(static_cast<float>(total), scale);
  }
  __syncthreads();
  // softmax over the question's options, in option order (each thread the same, so no barrier is needed after)
  float top = -INFINITY;
  for (int32_t o = begin; o < end; ++o) top = fmaxf(top, scores[o]);
  double sum = 0;
  for (int32_t o = begin; o < end; ++o) sum += expf(scores[o] - top);
  const auto inverse = static_cast<float>(1.0 / sum);
  for (int32_t c = threadIdx.x; c < width; c += kThreads) {
    float value = 0;
    for (int32_t o = begin; o < end; ++o)
      value = __fadd_rn(value,
                        __fmul_rn(__fmul_rn(expf(scores[o] - top), inverse), r[static_cast<int64_t>(o) * width + c]));
    summaries[static_cast<int64_t>(question) * width + c] = value;
  }
}

__global__ void add_global_and_type_kernel(float* f, const float* global, const float* type_embedding,
                                           const int32_t* types, int32_t questions, int32_t width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(questions) * width) return;
  const int64_t question = i / width, c = i % width;
  f[i] = __fadd_rn(f[i], __fadd_rn(global[c], type_embedding[static_cast<int64_t>(types[question]) * width + c]));
}

__global__ void scorer_features_kernel(const float* fo, const float* o, int32_t options, int32_t width,
                                       float* features) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(options) * width) return;
  const int64_t n = i / width, c = i % width;
  const float a = fo[i], z = o[i];
  float* row = features + n * 4 * width;
  row[c] = a;
  row[width + c] = z;
  row[2 * width + c] = __fmul_rn(a, z);
  row[3 * width + c] = fabsf(__fsub_rn(a, z));
}

// <a / max(|a|, eps), b / max(|b|, eps)> in double, as head_forward.cc's normalized_dot; b_extra, when set, is added
// to b element by element first (in float, as the host forms q_i + g).
__device__ float normalized_dot(const float* a, const float* b, const float* b_extra, int32_t n, double eps,
                                double* shared) {
  double aa = 0, bb = 0;
  for (int32_t c = threadIdx.x; c < n; c += kThreads) {
    const float bc = b_extra != nullptr ? __fadd_rn(b[c], b_extra[c]) : b[c];
    aa += static_cast<double>(a[c]) * a[c];
    bb += static_cast<double>(bc) * bc;
  }
  const double na = fmax(sqrt(block_sum(aa, shared)), eps), nb = fmax(sqrt(block_sum(bb, shared)), eps);
  double dot = 0;
  for (int32_t c = threadIdx.x; c < n; c += kThreads) {
    const float bc = b_extra != nullptr ? __fadd_rn(b[c], b_extra[c]) : b[c];
    dot += (a[c] / na) * (bc / nb);
  }
  return static_cast<float>(block_sum(dot, shared));
}

__global__ void __launch_bounds__(kThreads)
    option_scores_kernel(OptionScoreInputs in, float* logits, float* prior_out, float* joint_out) {
  __shared__ double shared[kWarps];
  const int32_t n = blockIdx.x, owner = in.owner[n];
  const float cos_prior = normalized_dot(in.lexical_means + static_cast<int64_t>(n) * in.hidden,
                                         in.question_means + static_cast<int64_t>(owner) * in.hidden, in.last_row,
                                         in.hidden, 1e-12, shared);
  const float cos_joint = normalized_dot(in.fo + static_cast<int64_t>(n) * in.width,
                                         in.o + static_cast<int64_t>(n) * in.width, nullptr, in.width, 1e-8, shared);
  if (threadIdx.x != 0) return;
  const float prior = __fmul_rn(in.prior_scale, cos_prior);
  const float joint = __fadd_rn(__fmul_rn(in.joint_scale, cos_joint), in.scored[n]);
  prior_out[n] = prior;
  joint_out[n] = joint;
  logits[n] = __fadd_rn(prior, __fmul_rn(in.gate, joint));
}

// ---- The folded attention (head_kernels.h, launch_folded_attention). Rows r of U, columns of S^T and rows of Z are
// (query, head) pairs, r = query * heads + head.

constexpr int kFoldKeysQueries = 8;                           // queries a thread of folded_keys takes at once
constexpr int kFoldColumns = 32, kFoldLanes = kThreads / 32;  // the softmax's blocks: 32 columns r x 8 row lanes
constexpr int kFoldTile = 64, kFoldStep = 16;                 // folded_rows: 64 r x 64 columns, 16 rows a step

// u[r, column] = sum_i q[query, head d + i] W_k[head d + i, column], the fma chain over i in order from +0 (a thread
// per column and head, its queries 8 at a time); c[r] = q_h . b_k,h the same way (0 without a key bias).
__global__ void __launch_bounds__(kThreads)
    folded_keys_kernel(const float* q, int32_t nq, const float* wk, const float* bk, int32_t width, int32_t d,
                       int32_t heads, float* u, float* c) {
  const int32_t head = blockIdx.y, column = static_cast<int32_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t first = static_cast<int64_t>(head) * d;  // the head's rows of W_k, its columns of q
  if (column < width)
    for (int32_t q0 = 0; q0 < nq; q0 += kFoldKeysQueries) {
      float acc[kFoldKeysQueries] = {};
      for (int32_t i = 0; i < d; ++i) {
        const float w = wk[(first + i) * width + column];
#pragma unroll
        for (int t = 0; t < kFoldKeysQueries; ++t)
          if (q0 + t < nq) acc[t] = fmaf(q[static_cast<int64_t>(q0 + t) * width + first + i], w, acc[t]);
      }
#pragma unroll
      for (int t = 0; t < kFoldKeysQueries; ++t)
        if (q0 + t < nq) u[(static_cast<int64_t>(q0 + t) * heads + head) * width + column] = acc[t];
    }
  if (blockIdx.x != 0) return;
  for (int32_t query = threadIdx.x; query < nq; query += kThreads) {
    float dot = 0;
    if (bk != nullptr)
      for (int32_t i = 0; i < d; ++i)
        dot = fmaf(q[static_cast<int64_t>(query) * width + first + i], bk[first + i], dot);
    c[static_cast<int64_t>(query) * heads + head] = dot;
  }
}

__device__ __forceinline__ float folded_score(float dot, float c, float scale) {
  return __fmul_rn(__fadd_rn(dot, c), scale);
}

// Per chunk of rows and column r of S^T [nm, R]: the largest score. A warp reads 32 adjacent columns of a row; its
// 8 warps take the chunk's rows 8 apart, then one thread per column takes their maxima.
__global__ void __launch_bounds__(kThreads)
    folded_max_kernel(const float* scores, int32_t nm, int32_t R, const float* c, float scale, int32_t chunk_rows,
                      float* chunk_max) {
  __shared__ float part[kFoldLanes][kFoldColumns];
  const int32_t r = static_cast<int32_t>(blockIdx.x) * kFoldColumns + threadIdx.x, chunk = blockIdx.y;
  const int32_t begin = chunk * chunk_rows, end = min(nm, begin + chunk_rows);
  float top = -INFINITY;
  if (r < R) {
    const float cr = c[r];
    for (int32_t j = begin + threadIdx.y; j < end; j += kFoldLanes)
      top = fmaxf(top, folded_score(scores[static_cast<int64_t>(j) * R + r], cr, scale));
  }
  part[threadIdx.y][threadIdx.x] = top;
  __syncthreads();
  if (threadIdx.y != 0 || r >= R) return;
  for (int i = 1; i < kFoldLanes; ++i) top = fmaxf(top, part[i][threadIdx.x]);
  chunk_max[static_cast<int64_t>(chunk) * R + r] = top;
}

// The same walk: e_j = exp(s_j - max over every chunk), written over the score, and the chunk's sum of e in double
// (each thread's rows in order, then the 8 warps' sums in warp order).
__global__ void __launch_bounds__(kThreads)
    folded_exp_kernel(float* scores, int32_t nm, int32_t R, const float* c, float scale, int32_t chunk_rows,
                      int32_t chunks, const float* chunk_max, double* chunk_sum) {
  __shared__ double part[kFoldLanes][kFoldColumns];
  const int32_t r = static_cast<int32_t>(blockIdx.x) * kFoldColumns + threadIdx.x, chunk = blockIdx.y;
  const int32_t begin = chunk * chunk_rows, end = min(nm, begin + chunk_rows);
  double sum = 0;
  if (r < R) {
    float top = -INFINITY;
    for (int32_t s = 0; s < chunks; ++s) top = fmaxf(top, chunk_max[static_cast<int64_t>(s) * R + r]);
    const float cr = c[r];
    for (int32_t j = begin + threadIdx.y; j < end; j += kFoldLanes) {
      float* at = scores + static_cast<int64_t>(j) * R + r;
      const float e = expf(__fsub_rn(folded_score(*at, cr, scale), top));
      *at = e;
      sum += e;
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || r >= R) return;
  double total = 0;
  for (int i = 0; i < kFoldLanes; ++i) total += part[i][threadIdx.x];
  chunk_sum[static_cast<int64_t>(chunk) * R + r] = total;
}

// partial[chunk, r, column] = sum over the chunk's rows j in order of e[j, r] m[j, column], one fma chain from +0:
// 64 x 64 outputs a block (4 x 4 a thread), e [nm, R] and m [nm, w] staged 16 rows at a time. Rows past the chunk
// are staged as zeros (fmaf(0, 0, acc) is acc).
__global__ void __launch_bounds__(kThreads)
    folded_rows_kernel(const float* e, int32_t R, const float* memory, int32_t nm, int32_t width, int32_t chunk_rows,
                       float* partial) {
  __shared__ float es[kFoldStep][kFoldTile + 4];
  __shared__ float ms[kFoldStep][kFoldTile + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int32_t c0 = static_cast<int32_t>(blockIdx.x) * kFoldTile, r0 = static_cast<int32_t>(blockIdx.y) * kFoldTile;
  const int32_t chunk = blockIdx.z, begin = chunk * chunk_rows, end = min(nm, begin + chunk_rows);
  float acc[4][4] = {};
  for (int32_t j0 = begin; j0 < end; j0 += kFoldStep) {
#pragma unroll
    for (int s = 0; s < kFoldTile * kFoldStep / kThreads; ++s) {
      const int idx = tid + s * kThreads, kk = idx / kFoldTile, col = idx % kFoldTile;
      const int32_t j = j0 + kk;
      const bool in = j < end;
      es[kk][col] = in && r0 + col < R ? e[static_cast<int64_t>(j) * R + r0 + col] : 0.0f;
      ms[kk][col] = in && c0 + col < width ? memory[static_cast<int64_t>(j) * width + c0 + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kFoldStep; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = es[kk][ty * 4 + i], b[i] = ms[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(a[i], b[jj], acc[i][jj]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int32_t r = r0 + ty * 4 + i, col = c0 + tx * 4 + jj;
      if (r < R && col < width) partial[(static_cast<int64_t>(chunk) * R + r) * width + col] = acc[i][jj];
    }
}

// z[r, column] = (the chunks' partial sums added in chunk order) * float(1 / the chunks' sums of e added in order).
__global__ void folded_sum_kernel(const float* partial, const double* chunk_sum, int32_t chunks, int32_t R,
                                  int32_t width, float* z) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x,
                outputs = static_cast<int64_t>(R) * width;
  if (i >= outputs) return;
  const int64_t r = i / width;
  double total = 0;
  float value = 0;
  for (int32_t s = 0; s < chunks; ++s) {
    total += chunk_sum[static_cast<int64_t>(s) * R + r];
    value = __fadd_rn(value, partial[s * outputs + i]);
  }
  z[i] = __fmul_rn(value, static_cast<float>(1.0 / total));
}

// out[query, column] = W_v[column, :] . z[query * heads + column / d, :] + b_v[column]: a warp per output, each lane's
// fma chain over the columns lane, lane + 32, ..., then the warp's fixed shuffle tree.
__global__ void __launch_bounds__(kThreads)
    folded_values_kernel(const float* z, int32_t nq, int32_t heads, int32_t width, int32_t d, const float* wv,
                         const float* bv, float* out) {
  const int64_t output = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (output >= static_cast<int64_t>(nq) * width) return;  // whole warps
  const int64_t query = output / width;
  const auto column = static_cast<int32_t>(output % width);
  const float* zr = z + (query * heads + column / d) * width;
  const float* wr = wv + static_cast<int64_t>(column) * width;
  float dot = 0;
  for (int32_t k = lane; k < width; k += 32) dot = fmaf(wr[k], zr[k], dot);
  dot = warp_sum(dot);
  if (lane == 0) out[output] = bv != nullptr ? __fadd_rn(dot, bv[column]) : dot;
}

}  // namespace

void launch_layer_norm(const float* x, int64_t rows, int32_t width, const float* weight, const float* bias, float* out,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, width, weight, bias, out);
  check_launch("head layer_norm");
}

void launch_bias_gelu(float* y, int64_t rows, int32_t width, const float* bias, bool gelu, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0 || (bias == nullptr && !gelu)) return;
  bias_gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, width, bias, gelu);
  check_launch("head bias_gelu");
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("head add");
}

void launch_gather(const float* x, int32_t width, const int32_t* index, int32_t count, float* out,
                   cudaStream_t stream) {
  if (count <= 0) return;
  gather_kernel<<<grid_for(static_cast<int64_t>(count) * width), kThreads, 0, stream>>>(x, width, index, count, out);
  check_launch("head gather");
}

namespace {
// The dynamic shared memory a block may have beyond the kernel's own arrays, opted into once.
size_t attention_scores_limit() {
  static const size_t limit = [] {
    int device = 0, optin = 0;
    check_cuda(cudaGetDevice(&device), "head attention: device");
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "head attention: shared memory limit");
    const size_t fixed = sizeof(float) * kWarps * kMaxHeadDim + (sizeof(double) + sizeof(float)) * kWarps;
    const size_t dynamic = static_cast<size_t>(optin) - fixed;
    check_cuda(
        cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic)),
        "head attention: shared memory");
    return dynamic;
  }();
  return limit;
}
}  // namespace

int64_t attention_max_memory_rows() { return static_cast<int64_t>(attention_scores_limit() / sizeof(float)); }

void launch_attention(const float* q, int32_t nq, const float* k, const float* v, int32_t nm, int32_t width,
                      int32_t heads, float* out, cudaStream_t stream) {
  if (nq <= 0) return;
  const size_t scores_bytes = static_cast<size_t>(nm) * sizeof(float);
  attention_scores_limit();
  attention_kernel<<<dim3(static_cast<unsigned>(nq), static_cast<unsigned>(heads)), kThreads, scores_bytes, stream>>>(
      q, k, v, nm, width, width / heads, out);
  check_launch("head attention");
}

namespace {
// The folded attention's scratch: each part 256-byte aligned (the products' operands must be 16-byte aligned).
struct FoldLayout {
  int32_t R = 0, chunk_rows = 0, chunks = 0;
  size_t u = 0, c = 0, scores = 0, chunk_max = 0, chunk_sum = 0, partial = 0, z = 0, bytes = 0;
};
FoldLayout fold_layout(int32_t queries, int32_t rows, int32_t width, int32_t heads) {
  FoldLayout l;
  l.R = queries * heads;
  // Chunks of at least 2 R rows keep the partial sums [chunks, R, w] within about half the memory rows' size.
  l.chunk_rows = static_cast<int32_t>(
      std::max<int64_t>(1, (2 * static_cast<int64_t>(l.R) + kFoldChunkRows - 1) / kFoldChunkRows) * kFoldChunkRows);
  l.chunks = (rows + l.chunk_rows - 1) / l.chunk_rows;
  const auto R = static_cast<size_t>(l.R), w = static_cast<size_t>(width), chunks = static_cast<size_t>(l.chunks);
  const auto take = [&](size_t bytes) {
    const size_t at = l.bytes;
    l.bytes += (bytes + 255) / 256 * 256;
    return at;
  };
  l.u = take(R * w * sizeof(float));
  l.c = take(R * sizeof(float));
  l.scores = take(static_cast<size_t>(rows) * R * sizeof(float));
  l.chunk_max = take(chunks * R * sizeof(float));
  l.chunk_sum = take(chunks * R * sizeof(double));
  l.partial = take(chunks * R * w * sizeof(float));
  l.z = take(R * w * sizeof(float));
  return l;
}
}  // namespace

size_t folded_attention_scratch_bytes(int32_t queries, int32_t rows, int32_t width, int32_t heads) {
  return fold_layout(queries, rows, width, heads).bytes;
}

void launch_folded_attention(const FoldedAttention& a, void* scratch, float* out, cudaStream_t stream) {
  if (a.queries <= 0 || a.rows <= 0) return;
  const FoldLayout l = fold_layout(a.queries, a.rows, a.width, a.heads);
  auto* base = static_cast<char*>(scratch);
  auto* u = reinterpret_cast<float*>(base + l.u);
  auto* c = reinterpret_cast<float*>(base + l.c);
  auto* scores = reinterpret_cast<float*>(base + l.scores);
  auto* chunk_max = reinterpret_cast<float*>(base + l.chunk_max);
  auto* chunk_sum = reinterpret_cast<double*>(base + l.chunk_sum);
  auto* partial = reinterpret_cast<float*>(base + l.partial);
  auto* z = reinterpret_cast<float*>(base + l.z);
  const int32_t d = a.width / a.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));  // launch_attention's, correctly rounded on both sides

  folded_keys_kernel<<<dim3(grid_for(a.width), static_cast<unsigned>(a.heads)), kThreads, 0, stream>>>(
      a.q, a.queries, a.key_weight, a.key_bias, a.width, d, a.heads, u, c);
  check_launch("head folded_keys");
  backend::cuda::launch_fp32_gemm(a.memory, a.rows, u, l.R, a.width, scores, stream);  // S^T [nm, R]
  const dim3 columns(static_cast<unsigned>((l.R + kFoldColumns - 1) / kFoldColumns), static_cast<unsigned>(l.chunks));
  const dim3 lanes(kFoldColumns, kFoldLanes);
  folded_max_kernel<<<columns, lanes, 0, stream>>>(scores, a.rows, l.R, c, scale, l.chunk_rows, chunk_max);
  check_launch("head folded_max");
  folded_exp_kernel<<<columns, lanes, 0, stream>>>(scores, a.rows, l.R, c, scale, l.chunk_rows, l.chunks, chunk_max,
                                                   chunk_sum);
  check_launch("head folded_exp");
  const dim3 tiles(static_cast<unsigned>((a.width + kFoldTile - 1) / kFoldTile),
                   static_cast<unsigned>((l.R + kFoldTile - 1) / kFoldTile), static_cast<unsigned>(l.chunks));
  folded_rows_kernel<<<tiles, kThreads, 0, stream>>>(scores, l.R, a.memory, a.rows, a.width, l.chunk_rows, partial);
  check_launch("head folded_rows");
  folded_sum_kernel<<<grid_for(static_cast<int64_t>(l.R) * a.width), kThreads, 0, stream>>>(partial, chunk_sum,
                                                                                            l.chunks, l.R, a.width, z);
  check_launch("head folded_sum");
  const int64_t warps = static_cast<int64_t>(a.queries) * a.width;
  folded_values_kernel<<<grid_for(warps * 32), kThreads, 0, stream>>>(z, a.queries, a.heads, a.width, d, a.value_weight,
                                                                      a.value_bias, out);
  check_launch("head folded_values");
}

void launch_span_sums(const float* normed, int32_t count, int32_t hidden, const int32_t* span_at, int64_t first,
                      double* sums, cudaStream_t stream) {
  if (count <= 0) return;
  span_sums_kernel<<<grid_for(hidden), kThreads, 0, stream>>>(normed, count, hidden, span_at, first, sums);
  check_launch("head span_sums");
}

void launch_span_means(const double* sums, const int32_t* sizes, int32_t spans, int32_t hidden, float* means,
                       cudaStream_t stream) {
  if (spans <= 0) return;
  span_means_kernel<<<grid_for(static_cast<int64_t>(spans) * hidden), kThreads, 0, stream>>>(sums, sizes, spans, hidden,
                                                                                             means);
  check_launch("head span_means");
}

void launch_question_summaries(const float* r, const float* b, const int32_t* first, int32_t questions, int32_t width,
                               float* scores, float* summaries, cudaStream_t stream) {
  if (questions <= 0) return;
  question_summaries_kernel<<<static_cast<unsigned>(questions), kThreads, 0, stream>>>(r, b, first, width, scores,
                                                                                       summaries);
  check_launch("head question_summaries");
}

void launch_add_global_and_type(float* f, const float* global, const float* type_embedding, const int32_t* types,
                                int32_t questions, int32_t width, cudaStream_t stream) {
  if (questions <= 0) return;
  add_global_and_type_kernel<<<grid_for(static_cast<int64_t>(questions) * width), kThreads, 0, stream>>>(
      f, global, type_embedding, types, questions, width);
  check_launch("head add_global_and_type");
}

void launch_scorer_features(const float* fo, const float* o, int32_t options, int32_t width, float* features,
                            cudaStream_t stream) {
  if (options <= 0) return;
  scorer_features_kernel<<<grid_for(static_cast<int64_t>(options) * width), kThreads, 0, stream>>>(fo, o, options,
                                                                                                   width, features);
  check_launch("head scorer_features");
}

void launch_option_scores(const OptionScoreInputs& in, float* logits, float* prior, float* joint, cudaStream_t stream) {
  if (in.options <= 0) return;
  option_scores_kernel<<<static_cast<unsigned>(in.options), kThreads, 0, stream>>>(in, logits, prior, joint);
  check_launch("head option_scores");
}

}  // namespace duet::decision::cuda
