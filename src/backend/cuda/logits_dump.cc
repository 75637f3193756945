#include "backend/cuda/logits_dump.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

LogitsDump::LogitsDump(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return;
  const std::string_view spec(value);
  const size_t colon = spec.rfind(':');
  if (colon == std::string_view::npos) return;
  left_ = std::atoll(std::string(spec.substr(colon + 1)).c_str());
  if (left_ <= 0) return;
  const std::string path(spec.substr(0, colon));
  file_ = std::fopen(path.c_str(), "wb");
  params_ = std::fopen((path + ".params").c_str(), "wb");
}

LogitsDump::~LogitsDump() {
  if (file_ != nullptr) std::fclose(file_);
  if (params_ != nullptr) std::fclose(params_);
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

namespace duet::backend::cuda {

void LogitsDump::append_row(const float* device_row, int64_t vocab, const SamplingRowParams& params) {
  append(device_row, 1, vocab);
  if (params_ != nullptr) {
    std::fwrite(&params, sizeof(params), 1, params_);
    std::fflush(params_);
  }
}

}  // namespace duet::backend::cuda
