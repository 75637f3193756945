#pragma once
// A step's structured-output masks, written when the backend asks for them (backend::MaskWriter; issue 19): each
// constrained sequence of the step writes its next token's mask straight into the backend's memory (the pinned upload
// buffer on a GPU) while the device runs the step's forward, instead of into a vector of its own before the step. A
// mask comes from its own sequence's grammar state alone, so a row's mask never depends on what else runs. One per
// step, engine thread only (a backend calls the writers on the thread that runs the step).
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"

namespace duet::engine {

class StepMasks {
 public:
  StepMasks() = default;
  StepMasks(const StepMasks&) = delete;
  StepMasks& operator=(const StepMasks&) = delete;

  // The writer of `sequence`'s mask for the token this step draws for it, allowing `end_ids` (its stop tokens) where
  // its document may end; null when that token is not constrained. Valid while this lives; the sequence's grammar
  // state must not move until the step has drawn.
  backend::MaskWriter* add(Sequence& sequence, std::vector<int32_t> end_ids);

  // The writer of a row of a step launched ahead with its masks held (Model::launch_holding_masks), for a sequence
  // with a grammar whether or not it holds yet: written once the step before is read, it writes the grammar's mask
  // if the grammar holds by then (its grammar_after was that step's token, or it held already), else every id (the
  // draw unconstrained, as a row without a mask draws: the masks add -inf only where a bit is clear).
  backend::MaskWriter* add_held(Sequence& sequence, std::vector<int32_t> end_ids);

  // A step launched ahead whose masks are held (Model::launch_holding_masks): `sequence` ended before they were
  // written and is about to go, so its writers write every token instead of reading it (the row is not read).
  void forget(const Sequence& sequence);

  // What the writers did: masks written and the seconds they took (EngineStats::grammar_mask*).
  int64_t written() const { return written_; }
  double seconds() const { return seconds_; }

 private:
  class Writer final : public backend::MaskWriter {
   public:
    Writer(StepMasks& owner, Sequence& sequence, std::vector<int32_t> end_ids)
        : owner_(owner), sequence_(&sequence), end_ids_(std::move(end_ids)), words_(sequence.mask_words()) {}
    size_t words() const override { return words_; }
    void write(std::span<uint32_t> words) override;
    const Sequence* sequence() const { return sequence_; }
    void forget() { sequence_ = nullptr; }

   private:
    StepMasks& owner_;
    Sequence* sequence_;  // null: forgotten
    std::vector<int32_t> end_ids_;
    size_t words_;
  };

  std::deque<Writer> writers_;  // a deque: the backend holds pointers to them
  int64_t written_ = 0;
  double seconds_ = 0;
};

}  // namespace duet::engine
