#pragma once
// DUET_PROFILE's sums (op_timer.h), kept apart by the kind of step that launched them: decode steps (every row a
// decode row) and steps with prefill rows, so that a run's table of decode kernels is not mixed with its prompt's
// prefill (issue 16 asks for the per-kernel GPU time of a decode step at 1 and 64 streams and of a 4K prefill), and
// each kind's per-step time can be read directly. Host code only: op_timer.cc feeds it the events' times.
#include <cstdint>
#include <map>
#include <string>

namespace duet::backend::cuda {

enum class StepKind { decode, prefill, outside };  // outside: launches before the first step

class OpTotals {
 public:
  void begin_step(StepKind kind, int64_t rows);
  // `ms` of GPU time under `name` in a step of `kind`.
  void add(StepKind kind, const std::string& name, double ms);
  // One table a kind that has any time: its steps, mean rows, total and per-step time, then each operation's calls,
  // total ms, us a step and share, largest first.
  std::string report() const;

 private:
  struct Total {
    double ms = 0;
    long calls = 0;
  };
  struct Kind {
    long steps = 0;
    int64_t rows = 0;
    std::map<std::string, Total> ops;
  };
  Kind kinds_[3];
};

const char* step_kind_name(StepKind kind);

}  // namespace duet::backend::cuda
