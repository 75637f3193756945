#include "backend/cuda/op_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "base/env_flag.h"

namespace duet::backend::cuda {

OpTimer::OpTimer() : on_(env_flag("DUET_PROFILE")) {}

cudaEvent_t OpTimer::event() {
  if (free_.empty()) {
    cudaEvent_t e;
    cudaEventCreate(&e);
    return e;
  }
  cudaEvent_t e = free_.back();
  free_.pop_back();
  return e;
}

void OpTimer::collect() {
  for (const Pending& p : pending_) {
    float ms = 0;
    if (cudaEventSynchronize(p.stop) == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      Total& t = totals_[std::string(p.name) + p.suffix];
      t.ms += ms;
      ++t.calls;
    }
    free_.push_back(p.start);
    free_.push_back(p.stop);
  }
  pending_.clear();
}

OpTimer::~OpTimer() {
  if (on_) {
    collect();
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0;
    for (const auto& [name, t] : rows) all += t.ms;
    std::fprintf(stderr, "DUET_PROFILE: GPU time per operation (CUDA events), %.1f ms in all\n", all);
    std::fprintf(stderr, "%-34s %8s %12s %7s\n", "operation", "calls", "total ms", "share");
    for (const auto& [name, t] : rows)
      std::fprintf(stderr, "%-34s %8ld %12.2f %6.1f%%\n", name.c_str(), t.calls, t.ms,
                   100.0 * t.ms / std::max(all, 1e-9));
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

}  // namespace duet::backend::cuda
