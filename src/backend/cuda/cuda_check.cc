#include "backend/cuda/cuda_check.h"

#include "backend/cuda/cublaslt_loader.h"
#include "base/error.h"

namespace duet::backend::cuda {

// DeviceError: after a failed call the device's state cannot be trusted, so the engine stops (engine.h).
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw DeviceError(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(status)));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string unopened = cublaslt_load_error();
  throw DeviceError(fmt::format("cuBLASLt: {}: status {}{}", what, static_cast<int>(status),
                                unopened.empty() ? "" : " (the library could not be opened: " + unopened + ")"));
}

}  // namespace duet::backend::cuda
