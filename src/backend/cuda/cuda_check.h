#pragma once
// CUDA and cuBLASLt return codes turned into duet::DeviceError naming the call, so a failure is never silent (and,
// after load, fatal to the engine). Declared
// here and defined in cuda_check.cc, so .cu files need no fmt.
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace duet::backend::cuda {

void check_cuda(cudaError_t status, const char* what);
void check_cublas(cublasStatus_t status, const char* what);
// After a kernel launch: a bad configuration shows here, not at the next synchronisation.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace duet::backend::cuda
