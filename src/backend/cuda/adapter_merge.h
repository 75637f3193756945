#pragma once
// A runtime adapter merged into a second copy of its projection at load: W' = bf16(W + B A), so that a decision's
// adapted rows take one GEMM over W' (the pinned GEMM of W's shape: the merged checkpoint's speed) instead of the
// base product plus two rank-wide products, a gather and a scatter per projection (docs/benchmarks.md, twenty-first
// round: 1.26-1.55x the merged checkpoint's latency that way at rank 256). The cost is one more copy of every adapted
// projection in the GPU's memory (13.8 GB for Qwen3.5-9B's 248), counted in the memory plan with the adapter.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_step.h"

namespace duet::backend::cuda {

// merged [out, in] = bf16(w [out, in] + b [out, rank] a [rank, in]), every operand row-major BF16 on the device,
// fp32 accumulation and one rounding (cuBLASLt with w as C, beta = 1). Synchronous; the same algorithm for the same
// shapes on every start (cuBLASLt's first heuristic answer), so the merged bits are the same on every load.
void merge_lora(cublasLtHandle_t lt, const bf16* w, const bf16* a, const bf16* b, int64_t out, int64_t in, int64_t rank,
                bf16* merged, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace duet::backend::cuda
