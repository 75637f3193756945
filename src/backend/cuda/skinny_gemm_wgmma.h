#pragma once
// The decode GEMM's warpgroup engine (skinny_gemm_wgmma.cu), launched by launch_skinny_gemm_segments for the shapes
// whose plan names it (skinny_gemm.cu, plan_for).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_step.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda::skinny {

constexpr int32_t kMaxRows = 64;  // x rows a launch; more take further launches of 64 that re-read w

// y = x w^T over `slices` k slices (1..8: the shape's, never m's), k % 16 == 0, x and w 16-byte aligned; `ahead`
// (1 or 2) steps of 64 loaded into registers ahead of the one stored, the weights asked of L2 `prefetch` steps ahead
// (0: not asked). The same bits as the mma.sync engine's for the same slices, whatever the pipeline.
void launch_wgmma(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& outputs,
                  bool y_f32, int slices, int ahead, int prefetch, cudaStream_t stream);

}  // namespace duet::backend::cuda::skinny
