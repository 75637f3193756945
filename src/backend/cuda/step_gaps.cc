#include "backend/cuda/step_gaps.h"

#include <cstdio>

#include "base/env_flag.h"

namespace duet::backend::cuda {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StepGaps::StepGaps() : on_(env_flag("DUET_STEP_GAPS")) {}

void StepGaps::entered() {
  if (on_) entered_ = Clock::now();
}

void StepGaps::began(int64_t rows) {
  if (!on_) return;
  rows_ = rows;
  began_ = sampling_ = enqueued_ = Clock::now();
}

void StepGaps::sampling() {
  if (on_) sampling_ = Clock::now();
}

void StepGaps::enqueued() {
  if (on_) enqueued_ = Clock::now();
}

void StepGaps::returned() {
  if (on_) last_returned_ = Clock::now();
}

void StepGaps::done() {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  Totals& t = by_rows_[rows_];
  ++t.steps;
  // The first step has no earlier one; a gap longer than a second is an idle server, not a stall.
  if (have_last_ && began_ - last_done_ < std::chrono::seconds(1)) {
    t.between += seconds(began_ - last_done_);
    t.results += seconds(last_returned_ - last_done_);
    t.outside += seconds(entered_ - last_returned_);
    t.planning += seconds(began_ - entered_);
  }
  t.before_launch += seconds(enqueued_ - began_);
  t.forward += seconds(sampling_ - began_);
  t.launch += seconds(enqueued_ - sampling_);
  t.on_gpu += seconds(now - enqueued_);
  last_done_ = now;
  have_last_ = true;
}

StepGaps::~StepGaps() {
  if (!on_ || by_rows_.empty()) return;
  std::fprintf(stderr,
               "DUET_STEP_GAPS: per step, ms: host between steps (GPU idle) / host before the step's work is all "
               "enqueued / enqueued to results back; between = results + outside + planning, before = forward + "
               "launch\n%8s %8s %10s %10s %10s %8s %9s %9s %9s %9s %9s\n",
               "rows", "steps", "between", "before", "on GPU", "idle %", "results", "outside", "planning", "forward",
               "launch");
  for (const auto& [rows, t] : by_rows_) {
    const double n = static_cast<double>(t.steps);
    const double all = t.between + t.before_launch + t.on_gpu;
    std::fprintf(stderr, "%8lld %8lld %10.3f %10.3f %10.3f %7.1f%% %9.3f %9.3f %9.3f %9.3f %9.3f\n",
                 static_cast<long long>(rows), static_cast<long long>(t.steps), 1e3 * t.between / n,
                 1e3 * t.before_launch / n, 1e3 * t.on_gpu / n,
                 all > 0 ? 100.0 * (t.between + t.before_launch) / all : 0.0, 1e3 * t.results / n, 1e3 * t.outside / n,
                 1e3 * t.planning / n, 1e3 * t.forward / n, 1e3 * t.launch / n);
  }
}

}  // namespace duet::backend::cuda
