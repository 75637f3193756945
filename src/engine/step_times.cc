#include "engine/step_times.h"

#include <cstdio>

#include "base/env_flag.h"

namespace duet::engine {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StepTimes::StepTimes() : on_(env_flag("DUET_STEP_GAPS")) {}

void StepTimes::entered() {
  if (on_) entered_ = Clock::now();
}

void StepTimes::forward() {
  if (on_) forward_ = Clock::now();
}

void StepTimes::returned() {
  if (on_) returned_ = Clock::now();
}

void StepTimes::left(int64_t pieces) {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  Totals& t = by_pieces_[pieces];
  ++t.steps;
  // A pause longer than a second is an idle engine, not its loop.
  if (have_last_ && entered_ - last_left_ < std::chrono::seconds(1)) t.loop += seconds(entered_ - last_left_);
  t.plan += seconds(forward_ - entered_);
  t.after += seconds(now - returned_);
  last_left_ = now;
  have_last_ = true;
}

StepTimes::~StepTimes() {
  if (!on_ || by_pieces_.empty()) return;
  std::fprintf(stderr,
               "DUET_STEP_GAPS (engine): per step, us: the engine's loop between steps / its planning before the model "
               "/ its work on the results\n%8s %8s %10s %10s %10s\n",
               "pieces", "steps", "loop", "plan", "results");
  for (const auto& [pieces, t] : by_pieces_) {
    const double n = static_cast<double>(t.steps);
    std::fprintf(stderr, "%8lld %8lld %10.1f %10.1f %10.1f\n", static_cast<long long>(pieces),
                 static_cast<long long>(t.steps), 1e6 * t.loop / n, 1e6 * t.plan / n, 1e6 * t.after / n);
  }
}

}  // namespace duet::engine
