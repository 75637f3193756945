#include "backend/cuda/op_timer.h"

#include <cstdio>
#include <string>

#include "base/env_flag.h"

namespace duet::backend::cuda {

OpTimer::OpTimer() : on_(env_flag("DUET_PROFILE")), skipped_(env_list("DUET_CUDA_SKIP_OPS")) {
  skipping_ = !skipped_.empty();
  for (const std::string& name : skipped_)
    std::fprintf(stderr, "DUET_CUDA_SKIP_OPS: %s is not launched (a measurement: the outputs are wrong)\n",
                 name.c_str());
}

bool OpTimer::skipped(const char* name) const {
  for (const std::string& s : skipped_)
    if (s == name) return true;
  return false;
}

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
      totals_.add(p.kind, std::string(p.name) + p.suffix, ms);
    }
    free_.push_back(p.start);
    free_.push_back(p.stop);
  }
  pending_.clear();
}

OpTimer::~OpTimer() {
  if (on_) {
    collect();
    std::fputs(totals_.report().c_str(), stderr);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

}  // namespace duet::backend::cuda
