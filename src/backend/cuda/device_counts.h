#pragma once
// A CUDA state storage's penalty counts (backend/penalty_counts.h): dense [slots, vocab] uint32 words in device memory,
// which the sampling kernel reads beside a row's logits (sampling.h, PenaltyTables). A batch of updates goes on the
// step stream between steps: its clears as memsets of their slots' rows, then its adds staged through pinned host
// memory and applied by one small kernel (penalty_counts.cu: an atomicAdd of one to the generated bits, an atomicOr of
// the prompt bit), so the order among the adds does not matter and the clears come first (for_counts_updates).
//
// Never inside a graph capture (it refuses while one is open on the stream): a replayed graph would apply the captured
// batch again, and the words' address, which the sampler takes as a kernel argument, must not move once a graph holds
// it (it never does: allocated once, at prepare_counts).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/penalty_counts.h"

namespace duet::backend::cuda {

class DeviceCounts {
 public:
  DeviceCounts(int64_t slots, int32_t vocab, cudaStream_t stream);  // all zero
  ~DeviceCounts();
  DeviceCounts(const DeviceCounts&) = delete;
  DeviceCounts& operator=(const DeviceCounts&) = delete;

  static size_t bytes_for(int64_t slots, int32_t vocab) { return static_cast<size_t>(slots) * vocab * 4; }
  // Checks the batch (check_counts_updates) and enqueues it on the stream.
  void update(std::span<const CountsUpdate> updates);
  // The device words: the samplers read them, the carry kernel adds a carried row's id (sampling.h).
  uint32_t* words() const { return static_cast<uint32_t*>(words_.ptr); }
  int64_t slots() const { return slots_; }
  int32_t vocab() const { return vocab_; }
  size_t bytes() const { return words_.bytes + staged_.bytes; }
  // For tests: every word, once the stream's work before this call is done.
  std::vector<uint32_t> read() const;

 private:
  cudaStream_t stream_;
  int64_t slots_;
  int32_t vocab_;
  DeviceMemory words_;          // [slots, vocab]
  uint32_t* host_ = nullptr;    // pinned staging of the adds: [2 * capacity_] (word index, kind) pairs
  size_t capacity_ = 0;         // adds
  DeviceMemory staged_;         // the device copy of host_
  cudaEvent_t sent_ = nullptr;  // the last batch's copy done: the staging may be written again
};

// The adds of a batch on the device: for each i < count, word adds[2i] of `words` gets one more generated (adds[2i + 1]
// == 0) or the prompt bit (adds[2i + 1] == 1). Asynchronous on `stream`.
void launch_apply_counts(uint32_t* words, const uint32_t* adds, int32_t count, cudaStream_t stream);

}  // namespace duet::backend::cuda
