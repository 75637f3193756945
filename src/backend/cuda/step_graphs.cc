#include "backend/cuda/step_graphs.h"

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

bool StepGraphs::begin(const StepGraphKey& key, cudaStream_t stream) {
  key_ = key;
  if (graphs_.contains(key)) return true;
  // Relaxed: the first launch of a kernel may set its shared-memory attribute, which is not a stream operation.
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin capturing a decode step");
  capturing_ = true;
  return false;
}

void StepGraphs::launch(cudaStream_t stream) {
  if (capturing_) {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(stream, &graph), "end capturing a decode step");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(status, "instantiate a decode step's graph");
    graphs_[key_] = exec;
  }
  check_cuda(cudaGraphLaunch(graphs_.at(key_), stream), "launch a decode step's graph");
}

void StepGraphs::abandon(cudaStream_t stream) {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // a capture invalidated by the failure leaves its error behind
}

void StepGraphs::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

}  // namespace duet::backend::cuda
