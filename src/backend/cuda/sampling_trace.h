#pragma once
// A hang locator for sampling.cu, off unless the file is compiled with -DDUET_SAMPLING_TRACE (tests/cuda builds a
// separate test binary so; production never). A kernel stuck at a barrier cannot be inspected with CUDA calls (they
// wait behind it), so every thread records, in host-mapped memory that the host reads while the kernel is stuck, the
// source line of the last block barrier (block_sync) it entered, the line and kind of the last cluster barrier half it
// entered, and how many of either it has entered. Threads that wait at different lines, or blocks of a cluster whose
// cluster barrier counts differ, name the unbalanced path. Device code for sampling.cu only (one translation unit).
#ifdef DUET_SAMPLING_TRACE
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/sampling.h"

namespace duet::backend::cuda::sampling {

__device__ SamplingTraceSlot* g_trace;

__device__ __forceinline__ void trace_sync_site(int line) {
  if (SamplingTraceSlot* t = g_trace) {
    volatile SamplingTraceSlot* s = t + blockIdx.x * blockDim.x + threadIdx.x;
    s->sync_line = static_cast<uint32_t>(line);
    s->entered = s->entered + 1;
    __threadfence_system();
  }
}
__device__ __forceinline__ void trace_cluster_site(int line, uint32_t kind) {
  if (SamplingTraceSlot* t = g_trace) {
    volatile SamplingTraceSlot* s = t + blockIdx.x * blockDim.x + threadIdx.x;
    s->cluster_line = static_cast<uint32_t>(line) | kind;
    s->entered = s->entered + 1;
    s->cluster_ops = s->cluster_ops + 1;
    __threadfence_system();
  }
}

}  // namespace duet::backend::cuda::sampling

#endif
