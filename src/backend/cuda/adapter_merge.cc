#include "backend/cuda/adapter_merge.h"

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {

namespace {

// cuBLASLt's objects for one call, released on every path.
struct MergeCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~MergeCall() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

void merge_lora(cublasLtHandle_t lt, const bf16* w, const bf16* a, const bf16* b, int64_t out, int64_t in, int64_t rank,
                bf16* merged, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  // Column-major, as cuBLASLt sees memory: a [rank, in] row-major is [in, rank] with ld in; b [out, rank] is
  // [rank, out] with ld rank; w and merged [out, in] are [in, out] with ld in. So merged = a * b + w, no transposes.
  MergeCall call;
  check_cublas(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "adapter merge: matmul desc");
  check_cublas(cublasLtMatrixLayoutCreate(&call.a, CUDA_R_16BF, in, rank, in), "adapter merge: layout of A");
  check_cublas(cublasLtMatrixLayoutCreate(&call.b, CUDA_R_16BF, rank, out, rank), "adapter merge: layout of B");
  check_cublas(cublasLtMatrixLayoutCreate(&call.c, CUDA_R_16BF, in, out, in), "adapter merge: layout of W");
  check_cublas(cublasLtMatmulPreferenceCreate(&call.preference), "adapter merge: preference");
  const uint64_t limit = workspace == nullptr ? 0 : workspace_bytes;
  check_cublas(cublasLtMatmulPreferenceSetAttribute(call.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                                    sizeof(limit)),
               "adapter merge: workspace limit");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_cublas(
      cublasLtMatmulAlgoGetHeuristic(lt, call.op, call.a, call.b, call.c, call.c, call.preference, 1, &result, &found),
      "adapter merge: heuristic");
  if (found == 0) fail("adapter merge: cuBLASLt offers no algorithm for [{}, {}] at rank {}", out, in, rank);
  const float alpha = 1.0f, beta = 1.0f;
  check_cublas(cublasLtMatmul(lt, call.op, &alpha, a, call.a, b, call.b, &beta, w, call.c, merged, call.c, &result.algo,
                              workspace, limit, stream),
               "adapter merge: matmul");
  check_cuda(cudaStreamSynchronize(stream), "adapter merge");
}

}  // namespace duet::backend::cuda
