#pragma once
// Helpers for the GPU tests (ctest label `cuda`): skip with the reason when there is no GPU, device buffers that
// free themselves, BF16 conversions and seeded random inputs. Never test on zeros (they hide unwritten outputs).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace duet::testing {

// Empty when a CUDA device is usable; otherwise why not.
inline std::string no_gpu_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device";
  return "";
}
#define DUET_REQUIRE_GPU()                                                \
  do {                                                                    \
    if (std::string why = ::duet::testing::no_gpu_reason(); !why.empty()) \
      GTEST_SKIP() << "skipped, needs a GPU: " << why;                    \
  } while (0)

#define DUET_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

inline float bf16_to_float(__nv_bfloat16 v) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const void*>(&v), 2);
  uint32_t f = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}
// Round to nearest even, as __float2bfloat16 and torch do (NaN kept NaN).
inline __nv_bfloat16 float_to_bf16(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  uint16_t bits;
  if (std::isnan(x)) {
    bits = 0x7fc0;
  } else {
    f += 0x7fff + ((f >> 16) & 1);
    bits = static_cast<uint16_t>(f >> 16);
  }
  __nv_bfloat16 out;
  std::memcpy(static_cast<void*>(&out), &bits, 2);
  return out;
}
inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// Uniform values in [lo, hi), already representable in BF16 (so host references see exactly what the GPU sees).
inline std::vector<float> random_bf16_values(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(dist(rng));
  return v;
}
inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}
inline std::vector<float> to_float(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// A device allocation of n elements of T, freed at scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n = 0) : n_(n) {
    if (n_ && cudaMalloc(&ptr_, n_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  // Fills with a NaN pattern so an unwritten output fails every comparison.
  void poison() { cudaMemset(ptr_, 0xff, n_ * sizeof(T)); }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// max |a - b| / max |b|, NaN anywhere gives infinity.
inline double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

// Whether two floats, or two float vectors, hold the same bits (NaNs and signed zeros included).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Mean |got - want| in double; infinite when the sizes differ or there is nothing to compare.
inline double mean_abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return INFINITY;
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) sum += std::fabs(static_cast<double>(got[i]) - want[i]);
  return sum / static_cast<double>(got.size());
}

// The rows gates' slack on the GPU: duet's mean |error| against transformers FP32 at most 1.25x transformers BF16's
// own (model_cuda_test.cc says why).
constexpr double kBf16Slack = 1.25;

}  // namespace duet::testing
