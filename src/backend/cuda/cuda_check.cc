#include "backend/cuda/cuda_check.h"

#include "base/error.h"

namespace duet::backend::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: {}: {}", what, cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt: {}: status {}", what, static_cast<int>(status));
}

}  // namespace duet::backend::cuda
