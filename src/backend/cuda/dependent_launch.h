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

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

__device__ __forceinline__ void let_dependents_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_for_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Steps of up to this many rows launch their kernels as dependents; larger ones in plain stream order. Measured with
// `duet run` on an H100 (docs/benchmarks.md, 26th round), decode tok/s with and without dependent launch: 1 stream 145
// / 142, 4 streams 569 / 543, 16: 1,886 / 1,845, 24: 2,641 / 2,578, but 32: 2,900 / 3,158, 48: 3,834 / 4,075, 64:
// 4,387 / 4,678; 1,024-row prefill chunks the same either way. (Why it turns between 24 and 32 rows is not measured
// yet.) Only when each kernel starts moves: no operation, so no bit.
constexpr int64_t kDependentLaunchMaxRows = 24;

// Whether a step of `rows` rows launches as dependents: kDependentLaunchMaxRows, unless DUET_CUDA_PDL=0 (never) or 1
// (always), or DUET_CUDA_PDL_MAX_ROWS sets the limit (for measurements).
bool dependent_launch_for_rows(int64_t rows);
// Sets the calling thread's launches for a step of `rows` rows (CudaBackend::begin_step, on the step's thread: a
// captured graph holds the launches of its step's row count, which its key includes). Other threads' launches (the
// decision head's, the vision tower's) stay dependent ones.
void set_dependent_launch_for_step(int64_t rows);

// The launch attribute for the kernel `what` names, launched by this thread now (set_dependent_launch_for_step), or a
// harmless one. For finding which kernels gain and which lose (the 26th round left it open), DUET_CUDA_PDL_FLIP=
// "name,name" inverts the step's choice for the kernels whose `what` contains one of the names (e.g. at 64 rows,
// DUET_CUDA_PDL_FLIP=skinny launches only the GEMMs as dependents; with DUET_CUDA_PDL=1, every kernel but them).
cudaLaunchAttribute dependent_launch_attribute(const char* what);

// DUET_CUDA_EARLY_LOADS=1 (read once; a measurement switch until the GPU suite has run with it): the kernels that read
// what no kernel of the step writes before them ask for it before wait_for_prerequisites(), in the previous kernel's
// tail, as the TMA GEMM asks for its weights: attention prep computes its RoPE table (the rows' positions come with the
// step's upload), the one-row delta-rule kernels copy the sequences' GDN states (written by the same layer's kernels in
// earlier steps; the conv kernel before them writes only the conv state and the layer's inputs), decode attention's
// lanes kernel asks for its first row's first batches of keys and values at earlier positions (prep writes only the
// row's own). The same operations on the same values, so the same bits; only when the reads start moves, and only in
// steps launched as dependents.
bool early_loads();

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
  cudaLaunchAttribute attribute = dependent_launch_attribute(what);
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
  attributes[0] = dependent_launch_attribute(what);
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster.x;
  attributes[1].val.clusterDim.y = cluster.y;
  attributes[1].val.clusterDim.z = cluster.z;
  config.attrs = attributes;
  config.numAttrs = 2;
  check_cuda(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), what);
}

}  // namespace duet::backend::cuda
