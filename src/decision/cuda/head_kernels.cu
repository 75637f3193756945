// The joint head's kernels (head_kernels.h). Where the host head (decision/head_math.cc, head_forward.cc) rounds
// in a given order, these use the same operations without contraction (__fmul_rn, __fadd_rn) so that the two stay
// within a few ulps of each other; sums the host takes in double are taken in double, in a fixed order per launch
// shape (a block's tree reduction never depends on what else runs).
#include "decision/cuda/head_kernels.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

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
