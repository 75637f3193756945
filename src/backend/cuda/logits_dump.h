#pragma once
// DUET_DUMP_LOGITS=FILE:N in the environment: the CUDA backend appends the logits of the first N rows it samples
// (fp32, vocab floats each, raw) to FILE, so that tests/cuda/sampling_bench.cc (`bench_sampling --logits FILE`) can
// time the device sampler on a real model's rows, whose shape a synthetic row only guesses. A diagnostic: off by
// default, and off it only tests a flag.
#include <cstdint>
#include <cstdio>
#include <string>

namespace duet::backend::cuda {

class LogitsDump {
 public:
  LogitsDump();
  ~LogitsDump();
  LogitsDump(const LogitsDump&) = delete;
  LogitsDump& operator=(const LogitsDump&) = delete;

  bool on() const { return file_ != nullptr && left_ > 0; }
  // Device logits [rows, vocab]; copies as many rows as are still wanted (synchronous: a diagnostic).
  void append(const float* device_logits, int64_t rows, int64_t vocab);

 private:
  std::FILE* file_ = nullptr;
  int64_t left_ = 0;
};

}  // namespace duet::backend::cuda
