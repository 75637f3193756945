#pragma once
// The cluster emulator's backend/cuda/dependent_launch.h: launch_dependent runs the grid on the emulator (no PDL).
#include <cuda_runtime.h>

#include "emu_runtime.h"
namespace duet::backend::cuda {
inline void let_dependents_launch() {}
inline void wait_for_prerequisites() {}
template <typename Kernel, typename A>
void launch_dependent(const char*, Kernel kernel, unsigned grid, int threads, size_t smem, cudaStream_t, A a) {
  emu_run_grid(static_cast<int>(grid), threads, smem, [&] { kernel(a); });
}
}  // namespace duet::backend::cuda
