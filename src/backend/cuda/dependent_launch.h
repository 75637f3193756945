#pragma once
// Programmatic dependent launch (Hopper): a kernel launched with the attribute below may start while the kernel before
// it in the stream is still running, so that it does the work that does not depend on that kernel (reading weights,
// which no kernel writes) in the other's tail. Two halves, both cheap no-ops when unused:
//  - let_dependents_launch(), called early by any kernel: a dependent launched with the attribute may be scheduled
//    once every block of this grid has called it (or exited). It publishes nothing: the dependent still waits.
//  - wait_for_prerequisites(), called by a kernel launched with the attribute before it reads anything an earlier
//    kernel wrote and before it writes anything: it returns once the previous grid has completed and its memory is
//    visible (as ordinary stream order would have guaranteed before the kernel started).
// A kernel launched with the attribute that reads or writes activations before wait_for_prerequisites() is a race;
// only kernels written for it get the attribute (dependent_launch_attribute(), launch_dependent()). The small kernels
// begin with `let_dependents_launch(); wait_for_prerequisites();` and gain only the launch latency; the skinny GEMM
// reads its weights in between.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

__device__ __forceinline__ void let_dependents_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_for_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// The launch attribute, or a harmless one when DUET_CUDA_PDL=0 (for measuring what it buys).
cudaLaunchAttribute dependent_launch_attribute();

// kernel<<<grid, block, smem, stream>>>(args...) with the attribute; `what` names it in errors. Only for kernels that
// call wait_for_prerequisites() before touching memory.
template <typename... Params, typename... Args>
void launch_dependent(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = dependent_launch_attribute();
  config.attrs = &attribute;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), what);
}

// The same for a kernel whose blocks form clusters of `cluster` (thread block clusters: distributed shared memory).
template <typename... Params, typename... Args>
void launch_dependent_clusters(const char* what, void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block,
                               size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0] = dependent_launch_attribute();
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster.x;
  attributes[1].val.clusterDim.y = cluster.y;
  attributes[1].val.clusterDim.z = cluster.z;
  config.attrs = attributes;
  config.numAttrs = 2;
  check_cuda(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), what);
}

}  // namespace duet::backend::cuda
