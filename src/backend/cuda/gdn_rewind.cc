#include "backend/cuda/gdn_rewind.h"

#include "backend/backend.h"
#include "base/error.h"

namespace duet::backend::cuda {

void GdnRewind::prepare(int64_t rows) {
  if (rows <= rows_) return;
  if (rows_ > 0) fail("cuda state: rewinding was prepared for pieces of {} rows, then asked for {}", rows_, rows);
  rows_ = rows;
  windows_ = DeviceMemory(static_cast<size_t>(slots_ * gdn_layers_) * bytes_per_layer(channels_, history_ + 1, rows_),
                          "GDN conv windows for rewinding");
}

bf16* GdnRewind::note_piece(int32_t slot, int64_t start_position, int64_t rows, bool rewindable,
                            int64_t* layer_stride) {
  Last& last = last_[static_cast<size_t>(slot)];
  last = {};
  if (!rewindable) return nullptr;
  if (rows_ == 0) fail("cuda state: a rewindable piece, but drafting was not prepared (StateStorage::prepare_rewind)");
  if (rows > rows_) fail("cuda state: a rewindable piece of {} rows; rewinding was prepared for {}", rows, rows_);
  const int64_t fold_row = kKvPagePositions - 1 - start_position % kKvPagePositions;
  if (fold_row >= 1 && fold_row < rows)
    fail(
        "cuda state: a rewindable piece at position {} of {} rows completes its chunk at row {}; this backend cannot "
        "take a fold back (StateStorage::can_rewind_folds)",
        start_position, rows, fold_row);
  last = {start_position, rows};
  *layer_stride = window_layer_stride();
  return window(slot);
}

void GdnRewind::rewind(int32_t slot, int64_t position, bf16* conv_state, int64_t conv_layer_stride) {
  Last& last = last_[static_cast<size_t>(slot)];
  if (last.start < 0 || position < last.start || position > last.start + last.rows)
    fail("cuda state: slot {} cannot rewind to position {}: its last step was not a rewindable one that ran it", slot,
         position);
  const int64_t kept = position - last.start;
  last = {};  // once: the state is now that of a step that ran `kept` rows
  if (gdn_layers_ == 0) return;
  const size_t element = sizeof(bf16);
  check_cuda(cudaMemcpy2DAsync(conv_state, static_cast<size_t>(conv_layer_stride) * element,
                               window(slot) + kept * channels_, static_cast<size_t>(window_layer_stride()) * element,
                               static_cast<size_t>(history_ * channels_) * element, static_cast<size_t>(gdn_layers_),
                               cudaMemcpyDeviceToDevice, stream_),
             "rewind GDN conv history");
}

}  // namespace duet::backend::cuda
