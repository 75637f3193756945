#pragma once
// The GEMM of prefill rows: y[m, n] = x[m, k] w[n, k]^T through cuBLASLt, BF16 in, fp32 accumulation, BF16 or fp32
// out, with ONE algorithm pinned per weight shape for every m.
//
// Why pinned: architecture.md ("Row invariance") measured on the H200 that cuBLASLt's heuristic picks a different
// algorithm for different m and that this changes a row's bits (3-19 of 4096 outputs at small m), while one pinned
// algorithm keeps them. So the algorithm is chosen once, at the largest m a step can have, checked to accept every
// smaller m, and used for every call. Split-K is avoided when any candidate allows it; a split-K algorithm that must
// be taken keeps its configuration (split count, reduction scheme) fixed, so its reduction order depends on k alone.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "backend/cuda/device_step.h"

namespace duet::backend::cuda {

// A cuBLASLt algorithm's configuration in one line (id, tile, stages, split-K and its reduction, swizzle, custom
// option, inner shape, cluster): for logs, tests and benchmarks.
std::string describe_cublaslt_algo(const cublasLtMatmulAlgo_t& algo);

class PinnedGemm {
 public:
  // Picks and checks the algorithm for w [n, k] (row-major, BF16), m from 1 to max_m; throws duet::Error naming the
  // shape when no algorithm accepts them all within `workspace_bytes`. `workspace` (device memory of at least
  // `workspace_bytes`, may be null when 0) is kept and used by every run; the caller keeps it alive, and runs on
  // different streams must not share it concurrently.
  PinnedGemm(cublasLtHandle_t handle, int64_t n, int64_t k, int64_t max_m, bool y_f32, void* workspace,
             size_t workspace_bytes);
  ~PinnedGemm();
  PinnedGemm(const PinnedGemm&) = delete;
  PinnedGemm& operator=(const PinnedGemm&) = delete;

  // y[m, n] = x[m, k] w[n, k]^T, asynchronous on `stream`; x, w, y 16-byte aligned; 0 <= m <= max_m. Allocates no
  // device memory. Thread-safe (runs are serialised on the host while their layouts are set).
  void run(const bf16* x, int64_t m, const bf16* w, void* y, cudaStream_t stream);

  // The pinned configuration (algorithm id, tile, stages, split-K, ...) for logs and tests.
  const std::string& describe() const { return description_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t max_m() const { return max_m_; }
  bool y_f32() const { return y_f32_; }

 private:
  void set_m(int64_t m);  // points the x and y layouts at m rows

  cublasLtHandle_t handle_;
  int64_t n_, k_, max_m_;
  bool y_f32_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;  // cuBLASLt's A
  cublasLtMatrixLayout_t x_layout_ = nullptr;  // cuBLASLt's B, m columns
  cublasLtMatrixLayout_t y_layout_ = nullptr;  // cuBLASLt's C and D, m columns
  cublasLtMatmulAlgo_t algo_{};
  std::string description_;
  std::mutex mutex_;  // guards the m of x_layout_ / y_layout_ between set_m and cublasLtMatmul
};

}  // namespace duet::backend::cuda
