#include "engine/step_masks.h"

#include <algorithm>
#include <chrono>

namespace duet::engine {

backend::MaskWriter* StepMasks::add(Sequence& sequence, std::vector<int32_t> end_ids) {
  return sequence.constrained() ? add_held(sequence, std::move(end_ids)) : nullptr;
}

backend::MaskWriter* StepMasks::add_held(Sequence& sequence, std::vector<int32_t> end_ids) {
  return &writers_.emplace_back(*this, sequence, std::move(end_ids));
}

void StepMasks::forget(const Sequence& sequence) {
  for (Writer& writer : writers_)
    if (writer.sequence() == &sequence) writer.forget();
}

void StepMasks::Writer::write(std::span<uint32_t> words) {
  if (sequence_ == nullptr || !sequence_->constrained()) {  // forgotten, or a held row whose grammar has not begun
    std::fill(words.begin(), words.end(), ~0u);
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  sequence_->write_mask(words, end_ids_);
  owner_.seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ++owner_.written_;
}

}  // namespace duet::engine
