#pragma once
// Taking back a verify piece's rejected rows on the GPU (backend::StateStorage::rewind, engine/draft_verify.h).
//
// The delta rule needs nothing: a sequence's delta-rule state is S_b, the state at its current chunk's start, plus
// that chunk's rows so far (delta_chunks.h), and a row past the rewound position is never read before a later row
// writes its place again; the host's position is all that moves. The one thing that cannot be taken back is a fold
// (a row completing its chunk folds the chunk into S_b): no copy of S_b from before it is kept, since that is the
// whole delta-rule state of the slot (about 100 MB at the 9B shape). So can_rewind_folds() is false, the engine
// drafts no verify piece whose row t >= 1 completes a chunk, and a plan with one is refused here by name.
//
// The conv history is what must be rebuilt: the K-1 inputs before the rewound position. For a rewindable piece the
// conv kernels (gdn_conv.cu) write its window, [the history before the step | the piece's inputs], for every GDN
// layer into its slot's window buffer here (DevicePiece::rewind_conv); rewinding copies the K-1 entries before the
// position back into the slot's history, one 2-D copy over the layers on the step stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

class GdnRewind {
 public:
  GdnRewind(int64_t slots, int64_t gdn_layers, int64_t channels, int64_t conv_kernel, cudaStream_t stream)
      : slots_(slots),
        gdn_layers_(gdn_layers),
        channels_(channels),
        history_(conv_kernel - 1),
        stream_(stream),
        last_(static_cast<size_t>(slots)) {}

  // Bytes per slot of one GDN layer for pieces of up to `rows` rows (Backend::gdn_rewind_bytes).
  static size_t bytes_per_layer(int64_t channels, int64_t conv_kernel, int64_t rows) {
    return static_cast<size_t>((conv_kernel - 1 + rows) * channels) * sizeof(bf16);
  }
  // Drafting is on: windows for pieces of up to `rows` rows (StateStorage::prepare_rewind). Once, at start.
  void prepare(int64_t rows);
  size_t bytes() const { return windows_.bytes; }

  // A step's piece of slot `slot` (from begin_step): a rewindable one gets its window (returned, with its layer stride
  // in *layer_stride) and becomes what rewind() can take back; any other piece ends what the slot's last step left to
  // take back. Refuses a rewindable piece longer than prepared, or one whose row t >= 1 completes a chunk.
  bf16* note_piece(int32_t slot, int64_t start_position, int64_t rows, bool rewindable, int64_t* layer_stride);
  // The slot's state changed outside a step (reset, fork, snapshot restored): nothing to take back.
  void forget(int32_t slot) { last_[static_cast<size_t>(slot)] = {}; }

  // The slot's conv history becomes the K-1 inputs before `position` (StateStorage::rewind's contract: right after
  // the step, start <= position <= start + rows). conv_state: the slot's [gdn_layers] histories, layer_stride apart.
  void rewind(int32_t slot, int64_t position, bf16* conv_state, int64_t conv_layer_stride);

 private:
  struct Last {
    int64_t start = -1, rows = 0;  // start -1: the slot's last step left nothing to take back
  };
  int64_t window_layer_stride() const { return (history_ + rows_) * channels_; }
  bf16* window(int32_t slot) const {
    return static_cast<bf16*>(windows_.ptr) + static_cast<int64_t>(slot) * gdn_layers_ * window_layer_stride();
  }

  int64_t slots_, gdn_layers_, channels_, history_;
  cudaStream_t stream_;
  int64_t rows_ = 0;        // the longest piece prepared for; 0: not prepared
  DeviceMemory windows_;    // [slots][gdn_layers][history + rows_][channels] bf16
  std::vector<Last> last_;  // per slot
};

}  // namespace duet::backend::cuda
