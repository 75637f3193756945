#pragma once
// y[m, n] = x[m, k] w[n, k]^T through cuBLASLt with an algorithm the caller picks, for the benchmarks that compare
// cuBLASLt's algorithms (bench_pinned_gemm: which to pin for prefill; bench_skinny_gemm --cublas: the heuristic's
// choice beside the decode GEMM). The layouts are PinnedGemm's (pinned_gemm.cc explains them): BF16 in and out, fp32
// accumulation, "TN". Benchmarks only: a failed call prints what failed and exits.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/pinned_gemm.h"

namespace duet::testing {

inline void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cublas status %d\n", what, static_cast<int>(status));
    std::exit(1);
  }
}

inline bool same_lt_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

struct LtGemm {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t w{}, x{}, y{};
  int64_t n, k;
  LtGemm(cublasLtHandle_t h, int64_t n_, int64_t k_, int64_t m) : handle(h), n(n_), k(k_) {
    check_lt(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    check_lt(cublasLtMatrixLayoutCreate(&w, CUDA_R_16BF, k, n, k), "w");
    check_lt(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, k, m, k), "x");
    check_lt(cublasLtMatrixLayoutCreate(&y, CUDA_R_16BF, n, m, n), "y");
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(y);
    cublasLtMatrixLayoutDestroy(x);
    cublasLtMatrixLayoutDestroy(w);
    cublasLtMatmulDescDestroy(op);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void set_m(int64_t m) {
    const uint64_t cols = static_cast<uint64_t>(m);
    check_lt(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)), "x cols");
    check_lt(cublasLtMatrixLayoutSetAttribute(y, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)), "y cols");
  }
  // The heuristic's algorithms for m rows, best first, up to `most`, each within `workspace` bytes.
  std::vector<cublasLtMatmulAlgo_t> heuristic(int64_t m, size_t workspace, int most = 32) {
    set_m(m);
    cublasLtMatmulPreference_t pref;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "pref");
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof(workspace)),
             "pref ws");
    std::vector<cublasLtMatmulHeuristicResult_t> results(most);
    int found = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle, op, w, x, y, y, pref, most, results.data(), &found), "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    std::vector<cublasLtMatmulAlgo_t> out;
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace)
        out.push_back(results[i].algo);
    return out;
  }
  bool accepts(const cublasLtMatmulAlgo_t& algo, int64_t m, size_t workspace) {
    set_m(m);
    cublasLtMatmulHeuristicResult_t r{};
    return cublasLtMatmulAlgoCheck(handle, op, w, x, y, y, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
           r.workspaceSize <= workspace;
  }
  void run(const cublasLtMatmulAlgo_t& algo, int64_t m, const void* wd, const void* xd, void* yd, void* ws,
           size_t ws_bytes, cudaStream_t stream = nullptr) {
    set_m(m);
    const float alpha = 1.0f, beta = 0.0f;
    check_lt(cublasLtMatmul(handle, op, &alpha, wd, w, xd, x, &beta, yd, y, yd, y, &algo, ws, ws_bytes, stream),
             "matmul");
  }
};

}  // namespace duet::testing
