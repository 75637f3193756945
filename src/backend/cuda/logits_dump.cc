#include "backend/cuda/logits_dump.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

LogitsDump::LogitsDump() {
  const char* value = std::getenv("DUET_DUMP_LOGITS");
  if (value == nullptr) return;
  const std::string_view spec(value);
  const size_t colon = spec.rfind(':');
  if (colon == std::string_view::npos) return;
  left_ = std::atoll(std::string(spec.substr(colon + 1)).c_str());
  if (left_ > 0) file_ = std::fopen(std::string(spec.substr(0, colon)).c_str(), "wb");
}

LogitsDump::~LogitsDump() {
  if (file_ != nullptr) std::fclose(file_);
}

void LogitsDump::append(const float* device_logits, int64_t rows, int64_t vocab) {
  const int64_t take = rows < left_ ? rows : left_;
  std::vector<float> host(static_cast<size_t>(take * vocab));
  check_cuda(cudaMemcpy(host.data(), device_logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
             "DUET_DUMP_LOGITS: logits to the host");
  std::fwrite(host.data(), sizeof(float), host.size(), file_);
  std::fflush(file_);
  left_ -= take;
}

}  // namespace duet::backend::cuda
