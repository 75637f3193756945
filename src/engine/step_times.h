#pragma once
// The engine thread's share of the host's time between two steps (issue 16 item 5): with DUET_STEP_GAPS=1, beside
// the CUDA backend's gaps (backend/cuda/step_gaps.h, which time the whole host interval from one step's results to the
// next step's upload), the engine notes when a step begins (entered), when it calls the model (forward) and gets its
// results back (returned), and when it is done with them (left). Printed when the engine is destroyed, per step on
// average and by the step's pieces: its planning (entered -> forward), its work on the results (returned -> left)
// and its loop between steps (left -> the next entered: admitting requests, ending decisions). What the backend's
// interval holds beyond these is the model's and the backend's own host work. Off by default; off, it only tests a
// flag.
#include <chrono>
#include <cstdint>
#include <map>

namespace duet::engine {

class StepTimes {
 public:
  StepTimes();
  ~StepTimes();
  StepTimes(const StepTimes&) = delete;
  StepTimes& operator=(const StepTimes&) = delete;

  void entered();
  void forward();
  void returned();
  void left(int64_t pieces);  // a step that ran the model

 private:
  using Clock = std::chrono::steady_clock;
  struct Totals {
    int64_t steps = 0;
    double loop = 0, plan = 0, after = 0;  // seconds
  };
  bool on_ = false;
  bool have_last_ = false;
  Clock::time_point last_left_, entered_, forward_, returned_;
  std::map<int64_t, Totals> by_pieces_;
};

}  // namespace duet::engine
