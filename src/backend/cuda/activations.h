#pragma once
// Activation functions shared by the kernels that apply them, so that each is one piece of source wherever it runs
// (the SwiGLU kernel, elementwise.cu, and the gate | up GEMM's epilogue, skinny_gemm_slices.h, must give the same
// bits).
#include <cuda_runtime.h>

namespace duet::backend::cuda {

// silu as scalar_math.h spells it (x / (1 + exp(-x))); expf without fast-math is accurate to 2 ulp.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

}  // namespace duet::backend::cuda
