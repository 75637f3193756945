#pragma once
// CUDA's double exp on the device, element by element (the one operation of the sampler's certified bounds that they
// allow for rather than reproduce; sampling_kernels_test.cc compares it with the host's). x and y are device arrays
// of n doubles; synchronous: the launch's or the run's error, or cudaSuccess.
#include <cuda_runtime.h>

namespace duet::testing {
cudaError_t device_exp(const double* x, double* y, int n);
}  // namespace duet::testing
