#pragma once
// cuBLASLt is opened with dlopen the first time one of its functions is called, not linked: the library is about
// 540 MB with some 350,000 relocations, and loading it at process start cost every duet process (a CPU server, `duet
// --help`, each test binary that links the CUDA backend) about 0.37 s of CPU time even where no GPU is ever used.
// cublaslt_loader.cc defines the cuBLASLt functions duet calls, each forwarding to the library's own; code calls
// them as declared in <cublasLt.h>. A function called while the library cannot be opened returns
// CUBLAS_STATUS_NOT_INITIALIZED, and check_cublas adds why (cublaslt_load_error).
#include <string>

namespace duet::backend::cuda {

// Where the library was opened from, or "" when it has not been opened (yet, or at all).
std::string cublaslt_loaded_from();
// Why it could not be opened (each path tried and dlerror's answer), or "" when it is open or was never needed.
std::string cublaslt_load_error();

}  // namespace duet::backend::cuda
