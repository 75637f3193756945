#include "backend/cuda/sampling_paths.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace duet::backend::cuda {

SamplingPaths::SamplingPaths() {
  const char* value = std::getenv("DUET_SAMPLING_PATHS");
  on_ = value != nullptr && std::string_view(value) == "1";
}

SamplingPaths::~SamplingPaths() {
  if (!on_ || counts_.empty()) return;
  int64_t total = 0;
  for (const auto& [path, n] : counts_) total += n;
  std::fprintf(stderr, "sampling paths (DUET_SAMPLING_PATHS=1, %lld rows):", static_cast<long long>(total));
  for (auto& [path, n] : counts_) {
    std::vector<uint32_t>& t = times_[path];
    std::sort(t.begin(), t.end());
    std::fprintf(stderr, " 0x%x %lld (%.1f%%, in the kernel p50 %.1f us, p90 %.1f us)", path, static_cast<long long>(n),
                 100.0 * n / total, t[t.size() / 2] / 1e3, t[t.size() * 9 / 10] / 1e3);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace duet::backend::cuda
