// The GDN gates on their own (launch_gdn_gates in kernels.h; the backend computes them beside the conv, gdn_conv.cu),
// one thread per (row, value head), the math of gdn_gate.h. Elementwise: every row's result depends on it alone.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/gdn_gate.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    gates_kernel(const bf16* b, const bf16* a, DeviceWeight A_log, DeviceWeight dt_bias, int64_t count,
                 int32_t value_heads, float* beta, float* g) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < count) gdn_gate(b, a, A_log, dt_bias, value_heads, i, beta, g);
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
