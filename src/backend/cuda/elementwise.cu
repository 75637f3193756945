// Elementwise kernels and row norms: embedding lookup, RMSNorm, residual add, SwiGLU, row gather, an adapter's row
// corrections, BF16 -> fp32.
// Each has a CPU twin in src/backend/cpu (norms.cc, mlp.cc, cpu_backend.cc) that the tests compare it with.
//
// Vector path: 16-byte loads/stores (8 BF16) when pointers and widths allow, scalar otherwise. Both paths do the
// same arithmetic in the same order per element, so which one runs (it depends on pointer alignment, which may
// differ between two calls for the same row) never changes a result's bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/activations.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kVec = 8;  // BF16 per 16-byte vector

// Throws duet::Error naming the launcher and the broken precondition (cuda_check keeps fmt out of .cu files).
void refuse(const char* what) { check_cuda(cudaErrorInvalidValue, what); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// A grid for grid-stride loops over `items`: enough blocks to fill the GPU several times, never more than needed.
unsigned grid_for(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65536));
}

union Pack8 {
  uint4 raw;
  __nv_bfloat162 pair[4];
  bf16 v[kVec];
};

__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  Pack8 p;
  p.raw = raw;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p.pair[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float* in) {
  Pack8 p;
#pragma unroll
  for (int i = 0; i < 4; ++i) p.pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  return p.raw;
}

// ---- embed / gather: one block per output row, a plain copy.
__global__ void copy_rows_kernel(const bf16* __restrict__ src, int64_t width, const int32_t* __restrict__ index,
                                 int32_t rows, bf16* __restrict__ out, bool vec) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  for (int32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const bf16* s = src + static_cast<int64_t>(index[r]) * width;
    bf16* d = out + static_cast<int64_t>(r) * width;
    if (vec) {
      const uint4* s4 = reinterpret_cast<const uint4*>(s);
      uint4* d4 = reinterpret_cast<uint4*>(d);
      for (int64_t i = threadIdx.x; i < width / kVec; i += blockDim.x) d4[i] = __ldg(s4 + i);
    } else {
      for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
    }
  }
}

void launch_copy_rows(const bf16* src, int64_t width, const int32_t* index, int32_t rows, bf16* out,
                      cudaStream_t stream, const char* name) {
  if (rows <= 0 || width <= 0) return;
  const bool vec = width % kVec == 0 && aligned16(src) && aligned16(out);
  const int64_t items = vec ? width / kVec : width;
  const int threads = static_cast<int>(std::clamp<int64_t>((items + 31) / 32 * 32, 32, 256));
  launch_dependent("copy_rows_kernel", copy_rows_kernel, static_cast<unsigned>(std::min(rows, 65536)), threads, 0,
                   stream, src, width, index, rows, out, vec);
  check_launch(name);
}

// ---- add_rows: one block per corrected row; each element one fp32 add and one rounding.
__global__ void add_rows_kernel(const float* __restrict__ delta, int64_t width, const int32_t* __restrict__ index,
                                int32_t rows, bf16* __restrict__ y) {
  for (int32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* d = delta + static_cast<int64_t>(r) * width;
    bf16* out = y + static_cast<int64_t>(index[r]) * width;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
      out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + d[i]);
  }
}

// ---- RMSNorm: one block per row.
//
// Row invariance: thread t owns the 8-element chunks t, t + T, t + 2T, ... (T = blockDim.x, chosen from the width
// alone) and adds their squares in element order into one fp32 sum; the block then reduces the T sums with a fixed
// xor-butterfly in each warp and a fixed butterfly over the warp sums. Nothing depends on the number of rows.
template <bool kWeightF32>
__device__ __forceinline__ void load_weight8(const void* w, int64_t first, int32_t width, bool vec, float* out) {
  if (kWeightF32) {
    const float* wf = static_cast<const float*>(w) + first;
    if (vec) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(wf));
      const float4 b = __ldg(reinterpret_cast<const float4*>(wf) + 1);
      out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = first + e < width ? wf[e] : 0.0f;
    }
  } else {
    const bf16* wb = static_cast<const bf16*>(w) + first;
    if (vec) {
      unpack8(__ldg(reinterpret_cast<const uint4*>(wb)), out);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = first + e < width ? __bfloat162float(wb[e]) : 0.0f;
    }
  }
}

// Sum over the block in a fixed order; every thread gets the same bits. `scratch` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warps = blockDim.x / 32;
  if (warps == 1) return v;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by the previous row's reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // warps is a power of two (see launch_rms_norm), so the butterfly below sums each value exactly once.
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int offset = warps / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);  // lanes past `warps` summed only zeros
}

// With `delta` (fused residual add): x += delta first, each element rounded to BF16 as add_kernel rounds it and
// written back by the thread that reads it again below, so the norm sees exactly what add then rms_norm would.
template <bool kWeightF32>
__global__ void rms_norm_kernel(bf16* x, const bf16* __restrict__ delta, int64_t rows, int32_t width,
                                const void* __restrict__ w, float eps, bool one_plus, bf16* out, bool vec) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  // x and out may alias (in place): no __restrict__, and each element is read and written by the same thread, the
  // write after the block-wide reduction that follows every read of the row.
  __shared__ float scratch[32];
  const int32_t chunks = (width + kVec - 1) / kVec;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    bf16* xr = x + r * width;
    bf16* yr = out + r * width;
    float sum = 0.0f;
    for (int32_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      float v[kVec];
      if (vec) {
        unpack8(*reinterpret_cast<const uint4*>(xr + static_cast<int64_t>(c) * kVec), v);
        if (delta != nullptr) {
          float d[kVec];
          unpack8(*reinterpret_cast<const uint4*>(delta + r * width + static_cast<int64_t>(c) * kVec), d);
#pragma unroll
          for (int e = 0; e < kVec; ++e) v[e] += d[e];
          const uint4 rounded = pack8(v);
          *reinterpret_cast<uint4*>(xr + static_cast<int64_t>(c) * kVec) = rounded;
          unpack8(rounded, v);
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const int64_t i = static_cast<int64_t>(c) * kVec + e;
          if (i < width && delta != nullptr)
            xr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) + __bfloat162float(delta[r * width + i]));
          v[e] = i < width ? __bfloat162float(xr[i]) : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum = __fmaf_rn(v[e], v[e], sum);  // padding zeros add exact zeros
    }
    sum = block_sum(sum, scratch);
    // 1 / sqrt as the CPU reference (norms.cc) computes it; IEEE sqrt and division (no fast-math).
    const float inv = 1.0f / sqrtf(sum / static_cast<float>(width) + eps);
    for (int32_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      const int64_t first = static_cast<int64_t>(c) * kVec;
      float v[kVec], wv[kVec], y[kVec];
      if (vec) {
        unpack8(*reinterpret_cast<const uint4*>(xr + first), v);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] = first + e < width ? __bfloat162float(xr[first + e]) : 0.0f;
      }
      load_weight8<kWeightF32>(w, first, width, vec, wv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) y[e] = (v[e] * inv) * (one_plus ? 1.0f + wv[e] : wv[e]);
      if (vec) {
        *reinterpret_cast<uint4*>(yr + first) = pack8(y);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          if (first + e < width) yr[first + e] = __float2bfloat16_rn(y[e]);
      }
    }
  }
}

// rms_norm_kernel's vector path where a row is at most one chunk a thread (every width up to 4,096: the 9B's hidden
// rows), the same operations in the same order, so the same bits; why: at one row this norm took 3.6 us, the chain of
// its memory waits (the row, then after the reduction the row again and the weight, each a round trip), 64 of them a
// decode step (docs/benchmarks.md, 36th round). Here the weight's chunk is asked for before the dependent-launch
// wait (no kernel writes weights), and the row's values stay in registers from the add to the output.
template <bool kWeightF32>
__global__ void rms_norm_chunk_kernel(bf16* x, const bf16* __restrict__ delta, int64_t rows, int32_t width,
                                      const void* __restrict__ w, float eps, bool one_plus, bf16* out) {
  const int32_t chunks = width / kVec;
  const int c = static_cast<int>(threadIdx.x);
  const bool owns = c < chunks;  // threads past the row's chunks add exact zeros to the sum, as in rms_norm_kernel
  const int64_t first = static_cast<int64_t>(c) * kVec;
  float scale[kVec];
  if (owns) {
    load_weight8<kWeightF32>(w, first, width, true, scale);
#pragma unroll
    for (int e = 0; e < kVec; ++e) scale[e] = one_plus ? 1.0f + scale[e] : scale[e];
  }
  wait_for_prerequisites();  // dependent_launch.h: no activation is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    bf16* xr = x + r * width;
    float v[kVec] = {};
    float sum = 0.0f;
    if (owns) {
      unpack8(*reinterpret_cast<const uint4*>(xr + first), v);
      if (delta != nullptr) {
        float d[kVec];
        unpack8(*reinterpret_cast<const uint4*>(delta + r * width + first), d);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] += d[e];
        const uint4 rounded = pack8(v);
        *reinterpret_cast<uint4*>(xr + first) = rounded;
        unpack8(rounded, v);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum = __fmaf_rn(v[e], v[e], sum);
    }
    sum = block_sum(sum, scratch);
    const float inv = 1.0f / sqrtf(sum / static_cast<float>(width) + eps);
    if (owns) {
      float y[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) y[e] = (v[e] * inv) * scale[e];
      *reinterpret_cast<uint4*>(out + r * width + first) = pack8(y);
    }
  }
}

// ---- add, swiglu, bf16 -> f32: grid-stride loops over 8-element chunks, the tail element by element.
__global__ void add_kernel(bf16* x, const bf16* y, int64_t n, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t body = vec ? n / kVec : 0;
  for (int64_t c = start; c < body; c += stride) {
    float a[kVec], b[kVec];
    unpack8(reinterpret_cast<const uint4*>(x)[c], a);
    unpack8(__ldg(reinterpret_cast<const uint4*>(y) + c), b);
#pragma unroll
    for (int e = 0; e < kVec; ++e) a[e] += b[e];
    reinterpret_cast<uint4*>(x)[c] = pack8(a);
  }
  for (int64_t i = body * kVec + start; i < n; i += stride)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(y[i]));
}

__global__ void swiglu_kernel(const bf16* gate, const bf16* __restrict__ up, int64_t n, bf16* out, bool vec) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  // out may alias gate: each element is read before it is written, by the same thread.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t body = vec ? n / kVec : 0;
  for (int64_t c = start; c < body; c += stride) {
    float g[kVec], u[kVec];
    unpack8(reinterpret_cast<const uint4*>(gate)[c], g);
    unpack8(__ldg(reinterpret_cast<const uint4*>(up) + c), u);
#pragma unroll
    for (int e = 0; e < kVec; ++e) g[e] = silu(g[e]) * u[e];
    reinterpret_cast<uint4*>(out)[c] = pack8(g);
  }
  for (int64_t i = body * kVec + start; i < n; i += stride)
    out[i] = __float2bfloat16_rn(silu(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}

__global__ void bf16_to_f32_kernel(const bf16* __restrict__ x, int64_t n, float* __restrict__ out, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t body = vec ? n / kVec : 0;
  for (int64_t c = start; c < body; c += stride) {
    float v[kVec];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x) + c), v);
    float4* o = reinterpret_cast<float4*>(out) + 2 * c;
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  for (int64_t i = body * kVec + start; i < n; i += stride) out[i] = __bfloat162float(x[i]);
}

// One element a thread: image rows are written once per prompt, never on a decode step's path.
__global__ void f32_to_bf16_kernel(const float* __restrict__ x, int64_t n, bf16* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __float2bfloat16_rn(x[i]);
}

constexpr int kElementwiseThreads = 256;

}  // namespace

void launch_embed(const bf16* table, int64_t hidden, const int32_t* ids, int32_t rows, bf16* out, cudaStream_t stream) {
  launch_copy_rows(table, hidden, ids, rows, out, stream, "launch_embed");
}

void launch_gather_rows(const bf16* x, int32_t width, const int32_t* rows, int32_t count, bf16* out,
                        cudaStream_t stream) {
  launch_copy_rows(x, width, rows, count, out, stream, "launch_gather_rows");
}

void launch_add_rows(const float* delta, int32_t width, const int32_t* rows, int32_t count, bf16* y,
                     cudaStream_t stream) {
  if (count <= 0 || width <= 0) return;
  const int threads = std::clamp((width + 31) / 32 * 32, 32, 256);
  add_rows_kernel<<<static_cast<unsigned>(std::min(count, 65536)), threads, 0, stream>>>(delta, width, rows, count, y);
  check_launch("launch_add_rows");
}

namespace {

// rms_norm_chunk_kernel where it applies, unless DUET_RMS_NORM_CHUNK=0 (read once; for A/B: the same bits).
bool rms_norm_by_chunk() {
  static const bool by_chunk = [] {
    const char* v = std::getenv("DUET_RMS_NORM_CHUNK");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return by_chunk;
}

void rms_norm(bf16* x, const bf16* delta, int64_t rows, int32_t width, DeviceWeight w, float eps, bool one_plus,
              bf16* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (width <= 0 || w.data == nullptr) refuse("launch_rms_norm: empty width or no weight");
  if (w.rows * w.cols != width) refuse("launch_rms_norm: the weight's element count is not the row width");
  // Threads from the width alone (row invariance): a power of two from 32 to 512, about one chunk per thread.
  const int32_t chunks = (width + kVec - 1) / kVec;
  int threads = 32;
  while (threads < chunks && threads < 512) threads *= 2;
  const bool vec = width % kVec == 0 && aligned16(x) && aligned16(out) && aligned16(w.data) &&
                   (delta == nullptr || aligned16(delta));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20));
  if (vec && chunks <= threads && rms_norm_by_chunk()) {
    if (w.f32) {
      launch_dependent("rms_norm_chunk_kernel", rms_norm_chunk_kernel<true>, grid, threads, 0, stream, x, delta, rows,
                       width, w.data, eps, one_plus, out);
    } else {
      launch_dependent("rms_norm_chunk_kernel", rms_norm_chunk_kernel<false>, grid, threads, 0, stream, x, delta, rows,
                       width, w.data, eps, one_plus, out);
    }
  } else if (w.f32) {
    launch_dependent("rms_norm_kernel", rms_norm_kernel<true>, grid, threads, 0, stream, x, delta, rows, width, w.data,
                     eps, one_plus, out, vec);
  } else {
    launch_dependent("rms_norm_kernel", rms_norm_kernel<false>, grid, threads, 0, stream, x, delta, rows, width, w.data,
                     eps, one_plus, out, vec);
  }
  check_launch("launch_rms_norm");
}

}  // namespace

void launch_rms_norm(const bf16* x, int64_t rows, int32_t width, DeviceWeight w, float eps, bool one_plus, bf16* out,
                     cudaStream_t stream) {
  // Without a delta the kernel never writes x.
  rms_norm(const_cast<bf16*>(x), nullptr, rows, width, w, eps, one_plus, out, stream);
}

void launch_add_rms_norm(bf16* x, const bf16* delta, int64_t rows, int32_t width, DeviceWeight w, float eps,
                         bool one_plus, bf16* out, cudaStream_t stream) {
  if (delta == nullptr) refuse("launch_add_rms_norm: no delta");
  if (x == out) refuse("launch_add_rms_norm: out must not alias x");
  rms_norm(x, delta, rows, width, w, eps, one_plus, out, stream);
}

void launch_add(bf16* x, const bf16* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(x) && aligned16(y);
  add_kernel<<<grid_for(vec ? n / kVec + kVec : n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(x, y, n,
                                                                                                           vec);
  check_launch("launch_add");
}

void launch_swiglu(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(gate) && aligned16(up) && aligned16(out);
  launch_dependent("swiglu_kernel", swiglu_kernel, grid_for(vec ? n / kVec + kVec : n, kElementwiseThreads),
                   kElementwiseThreads, 0, stream, gate, up, n, out, vec);
  check_launch("launch_swiglu");
}

void launch_bf16_to_f32(const bf16* x, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(x) && aligned16(out);
  bf16_to_f32_kernel<<<grid_for(vec ? n / kVec + kVec : n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      x, n, out, vec);
  check_launch("launch_bf16_to_f32");
}

void launch_f32_to_bf16(const float* x, int64_t n, bf16* out, cudaStream_t stream) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<grid_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(x, n, out);
  check_launch("launch_f32_to_bf16");
}

}  // namespace duet::backend::cuda
