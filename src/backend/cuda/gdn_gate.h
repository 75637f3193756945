#pragma once
// The GDN gates of one (row, value head), for the .cu files that compute them (gdn_gates.cu on its own, gdn_conv.cu
// beside the conv): beta = bf16(sigmoid(b)) kept as float, g = -exp(A_log) * softplus(a + dt_bias) in fp32, as the
// CPU's scalar_math.h and torch in fp32 (softplus(x) = x above 20). One definition, so both give the same bits.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

__device__ __forceinline__ float gate_weight_at(const DeviceWeight& w, int64_t i) {
  return w.f32 ? static_cast<const float*>(w.data)[i] : __bfloat162float(static_cast<const bf16*>(w.data)[i]);
}

// Entry i = row * value_heads + h of the [rows, value_heads] arrays.
__device__ __forceinline__ void gdn_gate(const bf16* b, const bf16* a, const DeviceWeight& A_log,
                                         const DeviceWeight& dt_bias, int32_t value_heads, int64_t i, float* beta,
                                         float* g) {
  const int32_t h = static_cast<int32_t>(i % value_heads);
  // transformers computes sigmoid on the BF16 projection and keeps a BF16 result; the delta rule reads it as fp32.
  const float sigmoid_b = 1.0f / (1.0f + expf(-__bfloat162float(b[i])));
  beta[i] = __bfloat162float(__float2bfloat16(sigmoid_b));
  // a is promoted to fp32 before dt_bias is added, so the sum is an fp32 sum whatever dt_bias's dtype.
  const float x = __bfloat162float(a[i]) + gate_weight_at(dt_bias, h);
  const float softplus = x > 20.0f ? x : log1pf(expf(x));
  g[i] = -expf(gate_weight_at(A_log, h)) * softplus;
}

}  // namespace duet::backend::cuda
