#include "backend/cuda/step_gaps.h"

#include <cstdio>

#include "base/env_flag.h"

namespace duet::backend::cuda {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StepGaps::StepGaps() : on_(env_flag("DUET_STEP_GAPS")) {}

void StepGaps::entered(cudaStream_t stream) {
  if (!on_) return;
  entered_ = Clock::now();
  GpuStep step;
  step.first = event();
  cudaEventRecord(step.first, stream);
  gpu_steps_.push_back(step);
}

void StepGaps::fetched(cudaStream_t stream) {
  if (!on_ || gpu_steps_.empty() || gpu_steps_.back().last != nullptr) return;
  gpu_steps_.back().last = event();
  gpu_steps_.back().rows = rows_;
  cudaEventRecord(gpu_steps_.back().last, stream);
}

cudaEvent_t StepGaps::event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaEventCreate(&e);
  return e;
}

void StepGaps::read_gpu(bool wait) {
  const auto recycle = [this](const GpuStep& step) {
    for (cudaEvent_t e : {step.first, step.last})
      if (e != nullptr) free_events_.push_back(e);
  };
  // The front step is the one before; a step without draws (no last event) breaks the chain: the steps on either
  // side of it are not counted as one after the other.
  while (gpu_steps_.size() >= 2) {
    const GpuStep before = gpu_steps_[0], step = gpu_steps_[1];
    if (before.last == nullptr || (step.last == nullptr && gpu_steps_.size() > 2)) {
      recycle(before);
      gpu_steps_.pop_front();
      continue;
    }
    if (step.last == nullptr) return;  // not sampled yet
    if (wait) cudaEventSynchronize(step.last);
    if (const cudaError_t state = cudaEventQuery(step.last); state != cudaSuccess) {
      if (state == cudaErrorNotReady) cudaGetLastError();  // not an error: it has not happened yet
      return;
    }
    float idle_ms = 0, busy_ms = 0;
    cudaEventElapsedTime(&idle_ms, before.last, step.first);
    cudaEventElapsedTime(&busy_ms, step.first, step.last);
    if (idle_ms < 1000) {  // a longer pause is an idle server, not a stall
      Totals& t = by_rows_[step.rows];
      ++t.gpu_steps;
      t.gpu_idle += idle_ms > 0 ? idle_ms / 1e3 : 0.0;
      t.gpu_busy += busy_ms / 1e3;
    }
    recycle(before);
    gpu_steps_.pop_front();
  }
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
  read_gpu(false);
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
  if (!on_) return;
  read_gpu(true);
  for (const GpuStep& step : gpu_steps_)
    for (cudaEvent_t e : {step.first, step.last})
      if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (by_rows_.empty()) return;
  std::fprintf(stderr,
               "DUET_STEP_GAPS: per step, ms: host between steps (GPU idle) / host before the step's work is all "
               "enqueued / enqueued to results back; between = results + outside + planning, before = forward + "
               "launch (host clocks: for steps planned after the last one's tokens); then the GPU's clock: its idle "
               "time between a step's draws copied and the next step's first copy, and its time from that copy to "
               "the draws copied\n%8s %8s %10s %10s %10s %8s %9s %9s %9s %9s %9s %9s %9s %10s\n",
               "rows", "steps", "between", "before", "on GPU", "idle %", "results", "outside", "planning", "forward",
               "launch", "gpu idle", "gpu step", "gpu idle %");
  for (const auto& [rows, t] : by_rows_) {
    const double n = static_cast<double>(t.steps);
    const double all = t.between + t.before_launch + t.on_gpu;
    const double g = static_cast<double>(t.gpu_steps > 0 ? t.gpu_steps : 1);
    const double gpu_all = t.gpu_idle + t.gpu_busy;
    std::fprintf(stderr, "%8lld %8lld %10.3f %10.3f %10.3f %7.1f%% %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f%%\n",
                 static_cast<long long>(rows), static_cast<long long>(t.steps), 1e3 * t.between / n,
                 1e3 * t.before_launch / n, 1e3 * t.on_gpu / n,
                 all > 0 ? 100.0 * (t.between + t.before_launch) / all : 0.0, 1e3 * t.results / n, 1e3 * t.outside / n,
                 1e3 * t.planning / n, 1e3 * t.forward / n, 1e3 * t.launch / n, 1e3 * t.gpu_idle / g,
                 1e3 * t.gpu_busy / g, gpu_all > 0 ? 100.0 * t.gpu_idle / gpu_all : 0.0);
  }
}

}  // namespace duet::backend::cuda
