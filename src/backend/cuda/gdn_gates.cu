// The GDN gates (launch_gdn_gates in kernels.h): beta = bf16(sigmoid(b)) and g = -exp(A_log) * softplus(a + dt_bias),
// one thread per (row, value head). Elementwise, so every row's result depends on that row alone.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float weight_at(const DeviceWeight& w, int64_t i) {
  return w.f32 ? static_cast<const float*>(w.data)[i] : __bfloat162float(static_cast<const bf16*>(w.data)[i]);
}

// As the CPU's scalar_math.h (and torch in fp32): sigmoid, and softplus with threshold 20.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void __launch_bounds__(kThreads)
    gates_kernel(const bf16* b, const bf16* a, DeviceWeight A_log, DeviceWeight dt_bias, int64_t count,
                 int32_t value_heads, float* beta, float* g) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  const int32_t h = static_cast<int32_t>(i % value_heads);
  // transformers computes sigmoid on the BF16 projection and keeps a BF16 result; the delta rule reads it as fp32.
  beta[i] = __bfloat162float(__float2bfloat16(sigmoid(__bfloat162float(b[i]))));
  // a is promoted to fp32 before dt_bias is added, so the sum is an fp32 sum whatever dt_bias's dtype.
  const float x = __bfloat162float(a[i]) + weight_at(dt_bias, h);
  g[i] = -expf(weight_at(A_log, h)) * softplus(x);
}

}  // namespace

void launch_gdn_gates(const bf16* b, const bf16* a, DeviceWeight A_log, DeviceWeight dt_bias, int64_t rows,
                      int32_t value_heads, float* beta, float* g, cudaStream_t stream) {
  const int64_t count = rows * value_heads;
  if (count <= 0) return;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  launch_dependent("gates_kernel", gates_kernel, static_cast<uint32_t>(blocks), kThreads, 0, stream, b, a, A_log,
                   dt_bias, count, value_heads, beta, g);
  check_launch("gdn gates_kernel");
}

}  // namespace duet::backend::cuda
