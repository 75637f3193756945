#include "backend/cuda/step_upload.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "base/error.h"

namespace duet::backend::cuda {
namespace {

constexpr size_t kFirstCapacity = 4096;  // bytes per region: a decode step of a few hundred rows fits from the start

}  // namespace

StepUpload::~StepUpload() {
  if (sent_) {
    cudaEventSynchronize(sent_);
    cudaEventDestroy(sent_);
  }
  if (host_) cudaFreeHost(host_);
}

bool StepUpload::arrange(const StepSizes& bytes) {
  if (!sent_) check_cuda(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming), "step upload event");
  check_cuda(cudaEventSynchronize(sent_), "the last step's plan upload");  // the staging buffer is free
  end_ = 0;
  bool grew = false;
  for (size_t i = 0; i < kStepArrays; ++i) {
    if (bytes[i] <= capacity_[i]) continue;
    size_t capacity = std::max(capacity_[i], kFirstCapacity);
    while (capacity < bytes[i]) capacity *= 2;
    capacity_[i] = capacity;
    grew = true;
  }
  if (!grew && host_) return false;
  size_t at = 0;
  for (size_t i = 0; i < kStepArrays; ++i) {
    capacity_[i] = align_up(std::max(capacity_[i], kFirstCapacity));
    offset_[i] = at;
    at += capacity_[i];
  }
  if (at > total_) {
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    check_cuda(cudaMallocHost(&host_, at), "pinned plan buffer");
    device_ = DeviceMemory(at, "plan buffer");
    total_ = at;
  }
  return true;
}

const void* StepUpload::put(StepArray array, const void* src, size_t bytes) {
  const size_t i = index(array);
  if (bytes > capacity_[i]) fail("cuda backend: a step array of {} bytes where {} were arranged", bytes, capacity_[i]);
  if (bytes) {
    std::memcpy(static_cast<char*>(host_) + offset_[i], src, bytes);
    end_ = std::max(end_, offset_[i] + bytes);
  }
  return static_cast<const char*>(device_.ptr) + offset_[i];
}

void StepUpload::send(cudaStream_t stream) {
  if (end_ > 0) check_cuda(cudaMemcpyAsync(device_.ptr, host_, end_, cudaMemcpyHostToDevice, stream), "plan upload");
  check_cuda(cudaEventRecord(sent_, stream), "plan upload event");
}

}  // namespace duet::backend::cuda
