// The only kernel of the GPU tests' own: kept out of the test files so that they compile as host code (nvcc parses a
// .cu file three times).
#include "device_exp.h"

namespace duet::testing {
namespace {

__global__ void exp_kernel(const double* x, double* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = exp(x[i]);
}

}  // namespace

cudaError_t device_exp(const double* x, double* y, int n) {
  exp_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
  const cudaError_t launched = cudaGetLastError();
  return launched != cudaSuccess ? launched : cudaDeviceSynchronize();
}

}  // namespace duet::testing
