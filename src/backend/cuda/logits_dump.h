#pragma once
// DUET_DUMP_LOGITS=FILE:N in the environment: the CUDA backend appends the logits of the first N rows it samples
// (fp32, vocab floats each, raw) to FILE, so that tests/cuda/sampling_bench.cc (`bench_sampling --logits FILE`) can
// time the device sampler on a real model's rows, whose shape a synthetic row only guesses. DUET_DUMP_SLOW_ROWS=FILE:N
// does the same for the first N rows the sampler could only decide by its slow stream path, with each row's
// SamplingRowParams in FILE.params (bench_sampling replays them with the same seed and position). A diagnostic: off by
// default, and off it only tests a flag.
#include <cstdint>
#include <cstdio>
#include <string>

#include "backend/cuda/sampling.h"

namespace duet::backend::cuda {

class LogitsDump {
 public:
  explicit LogitsDump(const char* variable);
  ~LogitsDump();
  LogitsDump(const LogitsDump&) = delete;
  LogitsDump& operator=(const LogitsDump&) = delete;

  bool on() const { return file_ != nullptr && left_ > 0; }
  // Device logits [rows, vocab]; copies as many rows as are still wanted (synchronous: a diagnostic).
  void append(const float* device_logits, int64_t rows, int64_t vocab);
  // One row and the parameters it was sampled with.
  void append_row(const float* device_row, int64_t vocab, const SamplingRowParams& params);

 private:
  std::FILE* file_ = nullptr;
  std::FILE* params_ = nullptr;
  int64_t left_ = 0;
};

}  // namespace duet::backend::cuda
