#pragma once
// The vision tower as a step kind of its own (docs/vision.md 6): one prompt's images at a time, run a few tower stages
// (model/vision_run.h: the embedding, each block, the merger) before each engine step, so that a large image holds the
// other requests' steps for about a prefill chunk's time per step rather than for the whole tower. Its prompt waits,
// unplanned (Sequence::waits_for_tower), until the rows of every image it still reads are made; a step with nothing
// else to run runs the rest of the tower at once, since it would stall nobody. An image's rows depend on that image
// alone and each stage runs whole, in order, on the image's own state, so how the stages are spread over steps changes
// no request's bits; only when a prompt's prefill starts.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/sequence.h"
#include "model/vision_model.h"

namespace duet::engine {

class TowerRunner {
 public:
  // `step_seconds`: the tower's share of a step that has other pieces, spent in whole stages, at least one a step (0:
  // exactly one). `hidden`: the language model's width (the rows' width).
  TowerRunner(const model::VisionModel& vision, int64_t hidden, double step_seconds);
  ~TowerRunner();

  struct Progress {
    int64_t images = 0;  // images whose rows were made
    int64_t stages = 0;
    double seconds = 0;
  };
  // Runs the tower of `sequence` (Scheduler::next_tower) from `position`, where its prefill starts (an image wholly
  // before it is in a resumed state already, so not run): starts its run when it is not the current one (dropping
  // that), runs stages for the step's share (all that are left when `alone`), and gives the sequence its rows when its
  // last image ends: at once when `alone`, else at the next call, which runs no stage (so the step that ends the tower
  // beside others does not also carry the prompt's first prefill chunk: at worst a step holds the others for a tower
  // share or a prefill, not both). Throws what the tower throws; the run is dropped then.
  Progress advance(Sequence& sequence, int32_t position, bool alone);
  // The sequence whose run is under way, if any.
  std::optional<uint64_t> current() const;
  // Drops the run under way (its sequence ended, or no longer waits for it).
  void drop();

 private:
  struct Run;
  const model::VisionModel& vision_;
  int64_t hidden_;
  double step_seconds_;
  std::unique_ptr<Run> run_;
};

}  // namespace duet::engine
