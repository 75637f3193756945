#pragma once
// Which way the device sampler decided its rows (DeviceSample::path, the SamplingPath bits of sampling.h), counted
// with DUET_SAMPLING_PATHS=1 in the environment, with each path's time inside the kernel (median and 90th
// percentile), and printed when the backend is destroyed: a seeded step's cost
// depends on how often rows fall back from the tile or the weight bins to the radix passes or the stream, which a
// kernel benchmark on synthetic rows cannot tell for a real model's rows. Off by default; off, it only tests a flag.
#include <cstdint>
#include <map>
#include <vector>

namespace duet::backend::cuda {

class SamplingPaths {
 public:
  SamplingPaths();
  ~SamplingPaths();
  SamplingPaths(const SamplingPaths&) = delete;
  SamplingPaths& operator=(const SamplingPaths&) = delete;

  bool on() const { return on_; }
  // A row's path and its time inside the kernel (DeviceSample::ns).
  void count(uint32_t path, uint32_t ns) {
    ++counts_[path];
    times_[path].push_back(ns);
  }

 private:
  bool on_ = false;
  std::map<uint32_t, int64_t> counts_;
  std::map<uint32_t, std::vector<uint32_t>> times_;
};

}  // namespace duet::backend::cuda
