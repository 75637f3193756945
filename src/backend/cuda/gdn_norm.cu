// The gated RMSNorm of GDN (launch_gdn_gated_norm in kernels.h), one warp per (row, value head), the math of
// gdn_gated_norm.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/gdn_gated_norm.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

__global__ void __launch_bounds__(kThreads) gated_norm_kernel(const float* o, const bf16* z, DeviceWeight w, float eps,
                                                              int64_t vectors, int32_t dim, bf16* out) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int64_t vector = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (vector >= vectors) return;  // the whole warp leaves together, so the shuffles see full warps
  const int64_t base = vector * dim;
  gated_norm_head(o + base, z + base, w, eps, dim, out + base);
}

}  // namespace

void launch_gdn_gated_norm(const float* o, const bf16* z, DeviceWeight w, float eps, int64_t rows, int32_t heads,
                           int32_t dim, bf16* out, cudaStream_t stream) {
  const int64_t vectors = rows * heads;  // heads are contiguous, so (row, head) is vector row * heads + head
  if (vectors <= 0 || dim <= 0) return;
  const int64_t blocks = (vectors + kWarps - 1) / kWarps;
  launch_dependent("gated_norm_kernel", gated_norm_kernel, static_cast<uint32_t>(blocks), kThreads, 0, stream, o, z, w,
                   eps, vectors, dim, out);
  check_launch("gdn gated_norm_kernel");
}

}  // namespace duet::backend::cuda
