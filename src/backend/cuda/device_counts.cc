#include "backend/cuda/device_counts.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {

DeviceCounts::DeviceCounts(int64_t slots, int32_t vocab, cudaStream_t stream)
    : stream_(stream), slots_(slots), vocab_(vocab) {
  if (slots <= 0 || vocab <= 0 || bytes_for(slots, vocab) / 4 > UINT32_MAX)
    fail("cuda state: penalty counts for {} slots of {} ids (word indices must fit 32 bits)", slots, vocab);
  words_ = DeviceMemory(bytes_for(slots, vocab), "penalty counts");
  check_cuda(cudaMemsetAsync(words_.ptr, 0, words_.bytes, stream_), "clear the penalty counts");
  check_cuda(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming), "penalty counts event");
}

DeviceCounts::~DeviceCounts() {
  if (sent_) {
    cudaEventSynchronize(sent_);
    cudaEventDestroy(sent_);
  }
  if (host_) cudaFreeHost(host_);
}

void DeviceCounts::update(std::span<const CountsUpdate> updates) {
  check_counts_updates(updates, slots_, vocab_);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream_, &capture), "penalty counts: the stream's capture status");
  if (capture != cudaStreamCaptureStatusNone)
    fail("cuda state: penalty counts updated while a step is being captured into a graph");
  const size_t adds = static_cast<size_t>(std::count_if(
      updates.begin(), updates.end(), [](const CountsUpdate& u) { return u.kind != CountsUpdate::Kind::clear; }));
  check_cuda(cudaEventSynchronize(sent_), "penalty counts: the last batch's copy");  // the staging is free
  if (adds > capacity_) {
    const size_t capacity = std::max<size_t>(adds, 2 * capacity_);
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    check_cuda(cudaMallocHost(&host_, 2 * capacity * sizeof(uint32_t)), "pinned penalty counts staging");
    check_cuda(cudaStreamSynchronize(stream_), "penalty counts: the last batch's kernel");  // before staged_ goes
    staged_ = DeviceMemory(2 * capacity * sizeof(uint32_t), "penalty counts staging");
    capacity_ = capacity;
  }
  size_t n = 0;
  auto* words = static_cast<uint32_t*>(words_.ptr);
  for_counts_updates(
      updates,
      [&](int32_t slot) {
        check_cuda(
            cudaMemsetAsync(words + static_cast<size_t>(slot) * vocab_, 0, static_cast<size_t>(vocab_) * 4, stream_),
            "clear a slot's penalty counts");
      },
      [&](const CountsUpdate& u) {
        host_[2 * n] = static_cast<uint32_t>(static_cast<size_t>(u.slot) * vocab_ + static_cast<size_t>(u.id));
        host_[2 * n + 1] = u.kind == CountsUpdate::Kind::prompt ? 1u : 0u;
        ++n;
      });
  if (n == 0) return;
  check_cuda(cudaMemcpyAsync(staged_.ptr, host_, 2 * n * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_),
             "penalty counts upload");
  check_cuda(cudaEventRecord(sent_, stream_), "penalty counts event");
  launch_apply_counts(words, static_cast<const uint32_t*>(staged_.ptr), static_cast<int32_t>(n), stream_);
}

std::vector<uint32_t> DeviceCounts::read() const {
  std::vector<uint32_t> out(words_.bytes / 4);
  check_cuda(cudaStreamSynchronize(stream_), "penalty counts: finish the stream");
  check_cuda(cudaMemcpy(out.data(), words_.ptr, words_.bytes, cudaMemcpyDeviceToHost), "penalty counts to the host");
  return out;
}

}  // namespace duet::backend::cuda
