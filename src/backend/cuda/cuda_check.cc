#include "backend/cuda/cuda_check.h"

#include "base/error.h"

namespace duet::backend::cuda {

// DeviceError: after a failed call the device's state cannot be trusted, so the engine stops (engine.h).
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw DeviceError(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(status)));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(fmt::format("cuBLASLt: {}: status {}", what, static_cast<int>(status)));
}

}  // namespace duet::backend::cuda
