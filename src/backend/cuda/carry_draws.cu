// The ids of a step begun before the last step's draws reached the host (Backend::sample_ahead, StepPlan::carried):
// each carried row's id is copied from where the last step's sampler wrote it, on the device, so the host never waits
// for a token to send it back.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"

namespace duet::backend::cuda {

namespace {

__global__ void carry_draws_kernel(int32_t* ids, int32_t rows, const DeviceSample* draws) {
  for (int32_t r = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); r < rows;
       r += static_cast<int32_t>(gridDim.x * blockDim.x)) {
    const int32_t id = ids[r];
    if (id < 0) ids[r] = draws[-1 - id].id;
  }
}

}  // namespace

void launch_carry_draws(int32_t* ids, int32_t rows, const DeviceSample* draws, cudaStream_t stream) {
  if (rows <= 0) return;
  // A plain launch: the step's first kernel, launched as a dependent or not, reads the ids only after this one ends.
  carry_draws_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(ids, rows, draws);
  check_launch("launch_carry_draws");
}

}  // namespace duet::backend::cuda
