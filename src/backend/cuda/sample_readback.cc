#include "backend/cuda/sample_readback.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

namespace {

// The samples' bytes, to a 16-byte boundary: where the top logprobs start.
size_t samples_bytes(int64_t rows) { return (static_cast<size_t>(rows) * sizeof(DeviceSample) + 15) / 16 * 16; }

}  // namespace

SampleReadback::~SampleReadback() {
  if (host_) cudaFreeHost(host_);
  if (fetched_) cudaEventDestroy(fetched_);
}

size_t SampleReadback::device_bytes(int64_t rows) {
  return samples_bytes(rows) + static_cast<size_t>(rows) * kMaxTopLogprobs * sizeof(DeviceTopLogprob);
}

DeviceTopLogprob* SampleReadback::top_in(void* region, int64_t rows) {
  return reinterpret_cast<DeviceTopLogprob*>(static_cast<char*>(region) + samples_bytes(rows));
}

void SampleReadback::fetch(const void* region, int64_t rows, bool with_top, cudaStream_t stream) {
  const size_t bytes = device_bytes(rows);
  if (bytes > capacity_) {
    // The last step's copy has been waited for (the host read it), so the old buffer is free.
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    capacity_ = 0;
    const size_t capacity = std::max<size_t>(bytes, device_bytes(64));
    check_cuda(cudaMallocHost(&host_, capacity), "pinned sample results");
    capacity_ = capacity;
  }
  if (fetched_ == nullptr)
    check_cuda(cudaEventCreateWithFlags(&fetched_, cudaEventDisableTiming), "sample results event");
  rows_ = rows;
  const size_t sent = with_top ? bytes : samples_bytes(rows);
  check_cuda(cudaMemcpyAsync(host_, region, sent, cudaMemcpyDeviceToHost, stream), "sample results to the host");
  check_cuda(cudaEventRecord(fetched_, stream), "sample results event");
}

void SampleReadback::wait() const {
  if (fetched_ != nullptr) check_cuda(cudaEventSynchronize(fetched_), "sample results");
}

}  // namespace duet::backend::cuda
