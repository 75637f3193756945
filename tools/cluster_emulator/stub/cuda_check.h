#pragma once
// The cluster emulator's backend/cuda/cuda_check.h: a failed check aborts.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
namespace duet::backend::cuda {
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != 0) {
    std::fprintf(stderr, "check_cuda: %s\n", what);
    std::abort();
  }
}
inline void check_launch(const char*) {}
}  // namespace duet::backend::cuda
