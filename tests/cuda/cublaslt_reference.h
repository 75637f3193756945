#pragma once
// cuBLASLt's heuristic algorithms for one weight shape, behind an interface that CUDA sources can include
// (bench_skinny_gemm --cublas: nvcc's front end stops on cuBLASLt's heuristic-result vectors, so the cuBLASLt side is
// compiled as host C++ in cublaslt_reference.cc). y[m, n] = x[m, k] w[n, k]^T, BF16 in and out, fp32 accumulation.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace duet::testing {

class CublasLtReference {
 public:
  // w [n, k] row-major; up to max_m rows of x; `workspace_bytes` of device workspace, owned by the reference.
  CublasLtReference(int64_t n, int64_t k, int64_t max_m, size_t workspace_bytes);
  ~CublasLtReference();
  CublasLtReference(const CublasLtReference&) = delete;
  CublasLtReference& operator=(const CublasLtReference&) = delete;

  // Asks the heuristic for m rows (up to `most` algorithms, best first); returns how many it offered.
  int choose(int64_t m, int most);
  // Runs algorithm `index` of the last choose() on m rows, asynchronously on `stream` (capturable).
  void run(int index, int64_t m, const void* w, const void* x, void* y, cudaStream_t stream);
  // Algorithm `index` of the last choose(), in one line.
  std::string describe(int index) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace duet::testing
