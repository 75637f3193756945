#pragma once
// One image's vision tower run cut into stages (docs/vision.md 6): the patch embedding with the position embedding,
// each of the tower's blocks, and the merger, depth + 2 in all. A server runs a few stages at a time between the
// language model's steps (engine/tower_runner.h) so a large image does not hold other requests' decode steps for the
// whole tower; the rows are the same bits however the stages are spread, since each stage runs whole, in order, on
// this image's own state. Host (model/vision_tower.h) and GPU (model/cuda/device_vision_tower.h) runs implement it.
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace duet::model {

class VisionRun {
 public:
  virtual ~VisionRun() = default;
  int32_t stages() const { return stages_; }
  int32_t stages_done() const { return done_; }
  bool done() const { return done_ == stages_; }
  // Runs the next stage to its end (a GPU run waits for the device). Throws duet::Error on failure; the run is then
  // unusable.
  void run_stage() {
    if (done_ == stages_) fail("vision tower: a run asked for a stage after its last");
    run(done_);
    ++done_;
  }
  // The image's rows, [image tokens, out_hidden_size], once done(); the run gives them away.
  std::vector<float> take_rows() { return std::move(rows_); }

 protected:
  explicit VisionRun(int32_t stages) : stages_(stages) {}
  virtual void run(int32_t stage) = 0;  // 0: the embedding; 1..depth: block stage - 1; depth + 1: the merger (rows_)
  std::vector<float> rows_;

 private:
  int32_t stages_;
  int32_t done_ = 0;
};

}  // namespace duet::model
