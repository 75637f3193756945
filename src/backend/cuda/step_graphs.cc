#include "backend/cuda/step_graphs.h"

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {

bool StepGraphs::begin(const StepGraphKey& key, std::vector<uintptr_t> arguments, cudaStream_t stream) {
  key_ = key;
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    if (it->second.arguments != arguments)
      fail(
          "cuda backend: a decode step of {} rows would replay a graph captured with other launch arguments "
          "(a per-step array moved without the graphs being forgotten)",
          key.rows);
    return true;
  }
  arguments_ = std::move(arguments);
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
    graphs_[key_] = Captured{exec, std::move(arguments_)};
  }
  check_cuda(cudaGraphLaunch(graphs_.at(key_).exec, stream), "launch a decode step's graph");
}

void StepGraphs::abandon(cudaStream_t stream) {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // a capture invalidated by the failure leaves its error behind
}

void StepGraphs::clear() {
  for (auto& [key, captured] : graphs_) cudaGraphExecDestroy(captured.exec);
  graphs_.clear();
}

}  // namespace duet::backend::cuda
