#include "backend/cuda/dependent_launch.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/env_flag.h"

namespace duet::backend::cuda {

namespace {

// DUET_CUDA_PDL: "0" never, "1" always, unset: by the step's rows (DUET_CUDA_PDL_MAX_ROWS, default
// kDependentLaunchMaxRows).
struct DependentLaunchPolicy {
  int forced = -1;  // -1: by rows
  int64_t max_rows = kDependentLaunchMaxRows;
  std::vector<std::string> flipped;  // DUET_CUDA_PDL_FLIP's names
};

const DependentLaunchPolicy& policy() {
  static const DependentLaunchPolicy p = [] {
    DependentLaunchPolicy q;
    if (const char* v = std::getenv("DUET_CUDA_PDL"); v != nullptr && *v != '\0')
      q.forced = std::strcmp(v, "0") == 0 ? 0 : 1;
    if (const char* v = std::getenv("DUET_CUDA_PDL_MAX_ROWS"); v != nullptr && *v != '\0') q.max_rows = std::atoll(v);
    q.flipped = env_list("DUET_CUDA_PDL_FLIP");
    return q;
  }();
  return p;
}

// This thread's launches: the step thread's follow its step; any other thread's (and a step thread's before its
// first step) are dependent ones, as every launch was before the policy.
thread_local bool t_dependent = true;

}  // namespace

bool dependent_launch_for_rows(int64_t rows) {
  const DependentLaunchPolicy& p = policy();
  return p.forced >= 0 ? p.forced == 1 : rows <= p.max_rows;
}

void set_dependent_launch_for_step(int64_t rows) { t_dependent = dependent_launch_for_rows(rows); }

cudaLaunchAttribute dependent_launch_attribute(const char* what) {
  bool dependent = t_dependent;
  for (const std::string& name : policy().flipped)
    if (what != nullptr && std::strstr(what, name.c_str()) != nullptr) {
      dependent = !dependent;
      break;
    }
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = dependent ? 1 : 0;
  return a;
}

bool early_loads() {
  static const bool early = [] {
    const char* v = std::getenv("DUET_CUDA_EARLY_LOADS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return early;
}

}  // namespace duet::backend::cuda
