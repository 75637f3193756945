#pragma once
// Where a step's GPU time goes, per operation: with DUET_PROFILE=1 in the environment every launch the CUDA backend
// makes is bracketed by two CUDA events, and the elapsed times are summed per operation name and printed when the
// backend is destroyed (calls, total ms, us a step, share), one table for decode steps and one for steps with prefill
// rows (op_totals.h). Off by default; off, a timed launch is just the launch. (Nsight Systems is not on the GPU
// machine; events in the stream measure the same device time.)
//
// DUET_CUDA_SKIP_OPS="name,name" (a measurement switch, read once): the launches of those operations are not made at
// all, so a run's outputs are wrong (its tokens differ) and its speed says what the operations really cost in the
// step, dependent launches and all: a kernel timeline counts as a kernel's own the time the next GEMM spends asking
// for its first weights (docs/benchmarks.md, 38th round), leaving it out does not. For measurements only.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/op_totals.h"

namespace duet::backend::cuda {

class OpTimer {
 public:
  OpTimer();
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  bool on() const { return on_; }
  // The launches timed from here on belong to a step of this kind and row count (CudaBackend::begin_step).
  void begin_step(StepKind kind, int64_t rows) {
    if (!on_) return;
    kind_ = kind;
    totals_.begin_step(kind, rows);
  }
  // Times `launch` under `name` + `suffix` (e.g. a GEMM's weight and which kernel ran it).
  template <typename Launch>
  void time(const char* name, cudaStream_t stream, Launch&& launch, const char* suffix = "") {
    if (skipping_ && skipped(name)) return;
    if (!on_) {
      launch();
      return;
    }
    Pending p{name, suffix, kind_, event(), event()};
    cudaEventRecord(p.start, stream);
    launch();
    cudaEventRecord(p.stop, stream);
    pending_.push_back(p);
  }
  // Adds up what the stream has finished; call after a synchronisation.
  void collect();
  // Drops what was added up so far (after a synchronisation): the tables start over.
  void restart() {
    collect();
    totals_ = OpTotals{};
  }

 private:
  struct Pending {
    const char* name;
    const char* suffix;
    StepKind kind;
    cudaEvent_t start, stop;
  };
  cudaEvent_t event();
  bool skipped(const char* name) const;

  bool on_ = false;
  std::vector<std::string> skipped_;  // DUET_CUDA_SKIP_OPS's names
  bool skipping_ = false;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  StepKind kind_ = StepKind::outside;
  OpTotals totals_;
};

}  // namespace duet::backend::cuda
