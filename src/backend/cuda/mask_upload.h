#pragma once
// Structured outputs' token masks on their way to the sampler, apart from the step's plan (step_upload.h). The plan
// goes up before the forward; the masks are written by the host while the forward runs (Backend::sample calls the
// specs' MaskWriters straight into the staging words here: no vector, no second copy) and go up on a stream of their
// own, so the copy overlaps the forward as well; the step's stream waits for it just before the sampler (issue 19).
//
// No captured graph reads these addresses (a masked step's graph ends at its logits; its sampler is launched after
// the masks are written), so growing the buffers moves nothing a graph holds.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cuda/device_memory.h"

namespace duet::backend::cuda {

class MaskUpload {
 public:
  MaskUpload() = default;
  ~MaskUpload();
  MaskUpload(const MaskUpload&) = delete;
  MaskUpload& operator=(const MaskUpload&) = delete;

  // Room for a step's `words` mask words. Waits until the last copy has left the staging words.
  void arrange(size_t words);
  // Staging words [offset, offset + count) (pinned host memory): where the host writes a row's mask.
  std::span<uint32_t> staging(size_t offset, size_t count);
  // The device copy of the staging words: the sampler's `masks`.
  const uint32_t* device() const { return static_cast<const uint32_t*>(device_.ptr); }
  // Copies staging words [0, words) to the device on the mask stream, once `consumer` has finished reading the last
  // step's (read_by), and makes `consumer`'s later work wait for the copy.
  void send(size_t words, cudaStream_t consumer);
  // Marks the point of `consumer` after which the device words may be written again (after the sampler's launch).
  void read_by(cudaStream_t consumer);
  // Waits on the host until the last send's copy is done (a test's planted fault writes the masks only then).
  void wait_sent();

 private:
  void create_stream();

  size_t capacity_ = 0;  // words
  uint32_t* host_ = nullptr;
  DeviceMemory device_;
  cudaStream_t stream_ = nullptr;  // the copies' own stream
  cudaEvent_t sent_ = nullptr;     // the last copy done: staging and device words hold this step's masks
  cudaEvent_t read_ = nullptr;     // the consumer done with the device words (read_by)
};

}  // namespace duet::backend::cuda
