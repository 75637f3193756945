// y = x w^T in fp32 for a decision head's products (launch_fp32_gemm in kernels.h). One 64 x 64 tile of y per block,
// 256 threads of 4 x 4 outputs; k is walked in steps of 16 staged in shared memory. Each output is one fma chain over
// k in order, from zero: its bits depend on its x row and w row alone, never on m or on the tile it sits in.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kTile = 64, kStep = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    fp32_gemm_kernel(const float* __restrict__ x, int32_t m, const float* __restrict__ w, int32_t n, int32_t k,
                     float* __restrict__ y) {
  __shared__ float xs[kStep][kTile + 4];  // [k][row]: a thread's 4 rows are adjacent
  __shared__ float ws[kStep][kTile + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[4][4] = {};
  for (int32_t k0 = 0; k0 < k; k0 += kStep) {
#pragma unroll
    for (int e = 0; e < kTile * kStep / kThreads; ++e) {
      const int idx = tid + e * kThreads, row = idx / kStep, kk = idx % kStep;
      const bool in_k = k0 + kk < k;
      xs[kk][row] = in_k && r0 + row < m ? x[(r0 + row) * k + k0 + kk] : 0.0f;
      ws[kk][row] = in_k && c0 + row < n ? w[(c0 + row) * k + k0 + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i], b[i] = ws[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r0 + ty * 4 + i, col = c0 + tx * 4 + j;
      if (row < m && col < n) y[row * n + col] = acc[i][j];
    }
}

}  // namespace

void launch_fp32_gemm(const float* x, int32_t m, const float* w, int32_t n, int32_t k, float* y, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  fp32_gemm_kernel<<<grid, kThreads, 0, stream>>>(x, m, w, n, k, y);
  check_launch("fp32_gemm_kernel");
}

}  // namespace duet::backend::cuda
