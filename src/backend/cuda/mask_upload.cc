#include "backend/cuda/mask_upload.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {
namespace {

constexpr size_t kFirstWords = size_t{1} << 16;  // 256 KB: eight rows of a 248,320-id vocabulary

}  // namespace

MaskUpload::~MaskUpload() {
  if (sent_) {
    cudaEventSynchronize(sent_);
    cudaEventDestroy(sent_);
  }
  if (read_) {
    cudaEventSynchronize(read_);
    cudaEventDestroy(read_);
  }
  if (stream_) cudaStreamDestroy(stream_);
  if (host_) cudaFreeHost(host_);
}

void MaskUpload::create_stream() {
  if (stream_) return;
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "mask upload stream");
  check_cuda(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming), "mask upload event");
  check_cuda(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming), "mask read event");
}

void MaskUpload::arrange(size_t words) {
  create_stream();
  check_cuda(cudaEventSynchronize(sent_), "the last step's mask upload");  // the staging words are free
  if (words <= capacity_) return;
  size_t capacity = std::max(capacity_, kFirstWords);
  while (capacity < words) capacity *= 2;
  check_cuda(cudaEventSynchronize(read_), "the last step's masked sampler");  // nothing reads the device words
  if (host_) cudaFreeHost(host_);
  host_ = nullptr;
  capacity_ = 0;
  void* host = nullptr;
  check_cuda(cudaMallocHost(&host, capacity * sizeof(uint32_t)), "pinned mask buffer");
  host_ = static_cast<uint32_t*>(host);
  device_ = DeviceMemory(capacity * sizeof(uint32_t), "mask buffer");
  capacity_ = capacity;
}

std::span<uint32_t> MaskUpload::staging(size_t offset, size_t count) {
  if (offset + count > capacity_)
    fail("cuda backend: mask words [{}, {}) where {} were arranged", offset, offset + count, capacity_);
  return {host_ + offset, count};
}

void MaskUpload::send(size_t words, cudaStream_t consumer) {
  if (words > capacity_) fail("cuda backend: sending {} mask words where {} were arranged", words, capacity_);
  check_cuda(cudaStreamWaitEvent(stream_, read_, 0), "mask upload: after the last masked sampler");
  if (words > 0)
    check_cuda(cudaMemcpyAsync(device_.ptr, host_, words * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_),
               "mask upload");
  check_cuda(cudaEventRecord(sent_, stream_), "mask upload event");
  check_cuda(cudaStreamWaitEvent(consumer, sent_, 0), "the sampler waits for its masks");
}

void MaskUpload::read_by(cudaStream_t consumer) { check_cuda(cudaEventRecord(read_, consumer), "mask read event"); }

void MaskUpload::wait_sent() { check_cuda(cudaEventSynchronize(sent_), "mask upload"); }

}  // namespace duet::backend::cuda
