#pragma once
// Where a step's wall time goes on the host side (issue 16 item 5, "the host never stalls the GPU"): with
// DUET_STEP_GAPS=1 in the environment the CUDA backend notes, per step, the host clock when the last step's results
// were back (the GPU idle from then on), when this step's first copy was enqueued (begin_step), when its work was all
// enqueued (the graph launched, or the sampler enqueued when eager), and when its results were back. Printed when the
// backend is destroyed, per step on average and by rows: the host's time between steps and before the GPU gets the
// step's work, against the time the GPU had work. For graphed (decode) steps the GPU idles through both host parts; an
// eager step's launches run while the host enqueues the next, so its "before" overlaps GPU work. Off by default; off,
// it only tests a flag.
//
// The host clocks above tell a step planned after the last one's tokens; with steps launched ahead (the engine's
// lookahead: the next step is enqueued before this one's draws are read) they overlap and mean little. What counts
// either way is measured on the GPU's clock too: an event before each step's first copy and one after its draws' copy,
// and the GPU's idle time between steps is the time from one step's last event to the next one's first (0 when the
// next step was enqueued in time).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace duet::backend::cuda {

class StepGaps {
 public:
  StepGaps();
  ~StepGaps();
  StepGaps(const StepGaps&) = delete;
  StepGaps& operator=(const StepGaps&) = delete;

  bool on() const { return on_; }
  void entered(cudaStream_t stream);  // begin_step is called: an event before the step's first copy
  void began(int64_t rows);           // begin_step: the step's upload is enqueued
  void sampling();                    // sample() is called
  void enqueued();                    // every launch of the step is in the stream (or the graph launched)
  void fetched(cudaStream_t stream);  // the draws' copy is in the stream: an event after it
  void done();                        // the step's results are on the host
  void returned();                    // sample() returns them

 private:
  using Clock = std::chrono::steady_clock;
  struct Totals {
    int64_t steps = 0;
    double between = 0, before_launch = 0, on_gpu = 0;  // seconds
    double results = 0, outside = 0, planning = 0;      // between's parts
    double forward = 0, launch = 0;                     // before_launch's parts
    int64_t gpu_steps = 0;                              // steps with a step before them on the GPU's clock
    double gpu_idle = 0, gpu_busy = 0;                  // seconds, the GPU's clock
  };
  // The GPU's clock: per step its first and last event, in step order; read once both of a pair have happened.
  struct GpuStep {
    cudaEvent_t first = nullptr, last = nullptr;
    int64_t rows = 0;
  };
  cudaEvent_t event();       // a timing event from the pool
  void read_gpu(bool wait);  // accounts the steps whose events have happened (all of them when `wait`)
  std::vector<cudaEvent_t> free_events_;
  std::deque<GpuStep> gpu_steps_;  // the last step read stays first: its `last` starts the next one's idle time
  bool on_ = false;
  bool have_last_ = false;
  int64_t rows_ = 0;
  Clock::time_point last_done_, last_returned_, entered_, began_, sampling_, enqueued_;
  std::map<int64_t, Totals> by_rows_;
};

}  // namespace duet::backend::cuda
