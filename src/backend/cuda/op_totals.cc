#include "backend/cuda/op_totals.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace duet::backend::cuda {

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::decode:
      return "decode steps";
    case StepKind::prefill:
      return "steps with prefill rows";
    case StepKind::outside:
      break;
  }
  return "launches outside steps";
}

void OpTotals::begin_step(StepKind kind, int64_t rows) {
  Kind& k = kinds_[static_cast<int>(kind)];
  ++k.steps;
  k.rows += rows;
}

void OpTotals::add(StepKind kind, const std::string& name, double ms) {
  Total& t = kinds_[static_cast<int>(kind)].ops[name];
  t.ms += ms;
  ++t.calls;
}

std::string OpTotals::report() const {
  std::string out;
  for (StepKind kind : {StepKind::decode, StepKind::prefill, StepKind::outside}) {
    const Kind& k = kinds_[static_cast<int>(kind)];
    if (k.ops.empty()) continue;
    std::vector<std::pair<std::string, Total>> rows(k.ops.begin(), k.ops.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0;
    for (const auto& [name, t] : rows) all += t.ms;
    const long steps = std::max(k.steps, 1L);
    out += fmt::format("DUET_PROFILE: {}: {} steps", step_kind_name(kind), k.steps);
    if (k.steps > 0) out += fmt::format(" of {:.1f} rows on average", static_cast<double>(k.rows) / k.steps);
    out += fmt::format(", GPU time per operation (CUDA events) {:.1f} ms in all", all);
    if (k.steps > 0) out += fmt::format(", {:.1f} us a step", 1000.0 * all / steps);
    out += fmt::format("\n{:<34} {:>8} {:>12} {:>11} {:>7}\n", "operation", "calls", "total ms", "us a step", "share");
    for (const auto& [name, t] : rows)
      out += fmt::format("{:<34} {:>8} {:>12.2f} {:>11.1f} {:>6.1f}%\n", name, t.calls, t.ms, 1000.0 * t.ms / steps,
                         100.0 * t.ms / std::max(all, 1e-9));
  }
  return out;
}

}  // namespace duet::backend::cuda
