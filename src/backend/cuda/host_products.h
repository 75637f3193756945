#pragma once
// fp32 products for work beside the model's steps (Backend::host_products): a decision head's memory projection and
// its evidence layers' keys and values run over every row of a long prompt, seconds on the host for a 16K prompt,
// milliseconds here. Host rows go up, the product (launch_fp32_gemm, batch-invariant) runs on a stream of its own,
// and the result comes back; weights are converted to fp32 and kept on the device at their first use. Callable
// from any thread (one product at a time); it never touches the steps' workspace or stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "backend/backend.h"

namespace duet::backend::cuda {

class HostProducts {
 public:
  HostProducts() = default;
  ~HostProducts();
  HostProducts(const HostProducts&) = delete;
  HostProducts& operator=(const HostProducts&) = delete;

  // y [m, w.rows] = x [m, w.cols] w^T, host memory in and out.
  void run(const float* x, int64_t m, const Weight& w, float* y);

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  float* grow(Buffer& buffer, size_t bytes);
  const float* weight(const Weight& w);

  std::mutex mutex_;
  cudaStream_t stream_ = nullptr;
  Buffer x_, y_;
  std::map<const void*, Buffer> weights_;  // by the host weight's address
};

}  // namespace duet::backend::cuda
