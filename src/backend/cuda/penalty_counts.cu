// The adds of a penalty counts batch (device_counts.h): one thread an add, atomics because a batch may name one word
// many times (a prompt's repeated ids, a token generated twice since the last step).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_counts.h"

namespace duet::backend::cuda {
namespace {

__global__ void apply_counts_kernel(uint32_t* words, const uint32_t* adds, int32_t count) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= count) return;
  uint32_t* word = words + adds[2 * i];
  if (adds[2 * i + 1] != 0u) {
    atomicOr(word, kCountsInPrompt);
  } else {
    atomicAdd(word, 1u);  // bits 0-30: a context never reaches 2^31 tokens, so no carry into the prompt bit
  }
}

}  // namespace

void launch_apply_counts(uint32_t* words, const uint32_t* adds, int32_t count, cudaStream_t stream) {
  if (count <= 0) return;
  constexpr int kThreads = 256;
  apply_counts_kernel<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(words, adds, count);
  check_launch("launch_apply_counts");
}

}  // namespace duet::backend::cuda
