// The ids of a step begun before the last step's draws reached the host (Backend::sample_ahead, StepPlan::carried):
// each carried row's id is copied from where the last step's sampler wrote it, on the device, so the host never waits
// for a token to send it back.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"

namespace duet::backend::cuda {

namespace {

// A carried row's counts word gets one more generated (bits 0-30; the prompt bit 31 is never reached by a count), by an
// atomic add: two rows of one slot would both count, in any order.
__global__ void carry_draws_kernel(int32_t* ids, int32_t rows, const DeviceSample* draws, const int32_t* counts_slots,
                                   uint32_t* counts, int32_t vocab) {
  for (int32_t r = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); r < rows;
       r += static_cast<int32_t>(gridDim.x * blockDim.x)) {
    const int32_t placeholder = ids[r];
    if (placeholder >= 0) continue;
    const int32_t id = draws[-1 - placeholder].id;
    ids[r] = id;
    const int32_t slot = counts_slots != nullptr ? counts_slots[r] : -1;
    if (slot >= 0 && id >= 0 && id < vocab) atomicAdd(&counts[static_cast<int64_t>(slot) * vocab + id], 1u);
  }
}

}  // namespace

void launch_carry_draws(int32_t* ids, int32_t rows, const DeviceSample* draws, const int32_t* counts_slots,
                        uint32_t* counts, int32_t vocab, cudaStream_t stream) {
  if (rows <= 0) return;
  // A plain launch: the step's first kernel, launched as a dependent or not, reads the ids only after this one ends.
  carry_draws_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(ids, rows, draws, counts_slots, counts, vocab);
  check_launch("launch_carry_draws");
}

}  // namespace duet::backend::cuda
