// CublasLtReference (cublaslt_reference.h) over LtGemm (cublaslt_bench_gemm.h).
#include "cublaslt_reference.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cublaslt_bench_gemm.h"

namespace duet::testing {

struct CublasLtReference::State {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes;
  std::unique_ptr<LtGemm> gemm;
  std::vector<cublasLtMatmulAlgo_t> algos;
};

CublasLtReference::CublasLtReference(int64_t n, int64_t k, int64_t max_m, size_t workspace_bytes)
    : state_(std::make_unique<State>()) {
  check_lt(cublasLtCreate(&state_->handle), "cublasLtCreate");
  state_->workspace_bytes = workspace_bytes;
  if (cudaMalloc(&state_->workspace, workspace_bytes) != cudaSuccess) {
    std::fprintf(stderr, "CublasLtReference: no %zu bytes of workspace\n", workspace_bytes);
    std::exit(1);
  }
  state_->gemm = std::make_unique<LtGemm>(state_->handle, n, k, max_m);
}

CublasLtReference::~CublasLtReference() {
  state_->gemm.reset();
  cudaFree(state_->workspace);
  cublasLtDestroy(state_->handle);
}

int CublasLtReference::choose(int64_t m, int most) {
  state_->algos = state_->gemm->heuristic(m, state_->workspace_bytes, most);
  return static_cast<int>(state_->algos.size());
}

void CublasLtReference::run(int index, int64_t m, const void* w, const void* x, void* y, cudaStream_t stream) {
  state_->gemm->run(state_->algos.at(static_cast<size_t>(index)), m, w, x, y, state_->workspace,
                    state_->workspace_bytes, stream);
}

std::string CublasLtReference::describe(int index) const {
  return duet::backend::cuda::describe_cublaslt_algo(state_->algos.at(static_cast<size_t>(index)));
}

}  // namespace duet::testing
