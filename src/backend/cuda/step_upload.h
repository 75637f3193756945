#pragma once
// A step's per-step arrays (pieces, rows, chunks, ids, page tables, sampling settings, extra ids, biases, ...) in one
// device buffer, each array in a region of its own at a fixed offset with a fixed capacity, copied up in one transfer.
//
// Why fixed: decode steps are replayed as CUDA graphs (step_graphs.h), and a captured kernel keeps the addresses it
// was launched with. If an array's address followed the sizes of the arrays before it (page tables grow as sequences
// do), a replayed graph would read a stale place: wrong tokens, no error (measured: penalties placed after the page
// tables moved when the step's page total crossed a multiple of 64). Here an address changes only when a region must
// grow; that moves every region and `arrange` says so, and the owner forgets its graphs.
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_memory.h"

namespace duet::backend::cuda {

enum class StepArray : int {
  pieces,
  row_piece,
  row_position,
  chunks,
  piece_order,
  chunk_order,
  ids,
  logit_rows,
  sample_rows,
  adapted_rows,
  sample_params,
  snapshots,   // GDN snapshots taken inside the step (prefill steps only)
  page_table,  // the growing ones last, so the bytes sent each step end soon after the last used one
  extra_ids,   // verify rows' earlier drafts (SamplingRowParams::extra_offset); the counts live in the storage
  biases,      // logit_bias (structured outputs' masks go up apart, after the forward: mask_upload.h)
  row_rope,    // rows' 3-D rotary positions, only in steps with images or a rope delta: late, so other steps send none
  carried_counts,  // [rows] the penalty counts' slot of each carried row or -1 (CarriedId::counts_slot); rarely sent
  count,
};
constexpr size_t kStepArrays = static_cast<size_t>(StepArray::count);
using StepSizes = std::array<size_t, kStepArrays>;  // bytes per array

class StepUpload {
 public:
  StepUpload() = default;
  ~StepUpload();
  StepUpload(const StepUpload&) = delete;
  StepUpload& operator=(const StepUpload&) = delete;

  // Makes room for a step with these sizes. Waits until the last step's upload has left the staging buffer. True when
  // the regions moved (a region grew): every device address handed out before is void.
  bool arrange(const StepSizes& bytes);
  // Stages `bytes` of `src` as the array's content and returns its device address (fixed until arrange moves it).
  // An empty array still gets its region's address.
  const void* put(StepArray array, const void* src, size_t bytes);
  // Sends what was put since arrange, in one copy on `stream`.
  void send(cudaStream_t stream);

  // Region offsets and capacities, for tests.
  size_t offset(StepArray array) const { return offset_[index(array)]; }
  size_t capacity(StepArray array) const { return capacity_[index(array)]; }

 private:
  static size_t index(StepArray array) { return static_cast<size_t>(array); }

  StepSizes capacity_{};
  StepSizes offset_{};
  size_t end_ = 0;  // one past the last byte put this step
  size_t total_ = 0;
  void* host_ = nullptr;  // pinned staging, laid out as the device buffer
  DeviceMemory device_;
  cudaEvent_t sent_ = nullptr;  // the last send's copy done: the staging buffer may be written again
};

}  // namespace duet::backend::cuda
