#pragma once
// The sampled rows' results on their way back to the host at the end of every step (issue 16 item 5: the host's turn
// between steps is the GPU's idle time at one stream). The sampler writes the ids and the top logprobs into one device
// region, and they come back in one copy into page-locked memory: a copy into pageable memory goes through the
// driver's staging buffer (the host waits on it, then copies again), and there were two of them a step. The top
// logprobs cross only when a row asked for some.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/sampling.h"

namespace duet::backend::cuda {

class SampleReadback {
 public:
  SampleReadback() = default;
  ~SampleReadback();
  SampleReadback(const SampleReadback&) = delete;
  SampleReadback& operator=(const SampleReadback&) = delete;

  // The device region for `rows` rows: their DeviceSample, then (from a 16-byte boundary) kMaxTopLogprobs
  // DeviceTopLogprob a row.
  static size_t device_bytes(int64_t rows);
  static DeviceSample* samples_in(void* region) { return static_cast<DeviceSample*>(region); }
  static DeviceTopLogprob* top_in(void* region, int64_t rows);

  // Enqueues the copy of `region`'s samples (and its top logprobs when `with_top`) on `stream`, and an event after it.
  // The host reads them after wait(): a later step's work behind the copy in the stream (a step begun ahead,
  // Backend::sample_ahead) is not waited for.
  void fetch(const void* region, int64_t rows, bool with_top, cudaStream_t stream);
  void wait() const;
  const DeviceSample& sample(int64_t row) const { return samples_in(host_)[row]; }
  const DeviceTopLogprob& top(int64_t row, int32_t j) const { return top_in(host_, rows_)[row * kMaxTopLogprobs + j]; }

 private:
  void* host_ = nullptr;           // pinned
  size_t capacity_ = 0;            // bytes
  int64_t rows_ = 0;               // the last fetch's
  cudaEvent_t fetched_ = nullptr;  // recorded after the last fetch's copy
};

}  // namespace duet::backend::cuda
