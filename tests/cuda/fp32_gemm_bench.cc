// What the decision head's fp32 products cost on the device (issue 17: the head's time): launch_fp32_gemm_with each
// kernel that fits, on the head's shapes (a decision's options and questions against the [1024, 4096] and [4096,
// 1024] weights; its memory rows projected as a prompt chunk arrives; the attention's keys and values over L memory
// rows), median of 15 timed calls after a warm-up, and whether each kernel's bits equal tiles64's (they must).
// Not a test: numbers for docs/benchmarks.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"

using namespace duet::backend::cuda;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

struct Shape {
  const char* what;
  int32_t m, n, k;
};

}  // namespace

int main() {
  const Shape shapes[] = {
      {"option/question rows x [1024, 4096]", 6, 1024, 4096},
      {"", 64, 1024, 4096},
      {"", 136, 1024, 4096},
      {"", 192, 1024, 4096},
      {"few rows x [4096, 1024] (ff in)", 6, 4096, 1024},
      {"few rows x [1024, 1024]", 6, 1024, 1024},
      {"memory rows, a 4K chunk x [1024, 4096]", 4096, 1024, 4096},
      {"keys / values over L rows, L = 809", 809, 1024, 1024},
      {"", 4096, 1024, 1024},
      {"", 8192, 1024, 1024},
      {"", 16384, 1024, 1024},
  };
  int32_t max_m = 0, max_n = 0, max_k = 0;
  for (const Shape& s : shapes)
    max_m = std::max(max_m, s.m), max_n = std::max(max_n, s.n), max_k = std::max(max_k, s.k);
  std::vector<float> host(static_cast<size_t>(std::max(max_m, max_n)) * max_k);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : host) v = unit(rng);
  float *x = nullptr, *w = nullptr, *y = nullptr, *y_first = nullptr;
  const size_t out_count = static_cast<size_t>(max_m) * max_n;
  check(cudaMalloc(&x, host.size() * sizeof(float)), "x");
  check(cudaMalloc(&w, host.size() * sizeof(float)), "w");
  check(cudaMalloc(&y, out_count * sizeof(float)), "y");
  check(cudaMalloc(&y_first, out_count * sizeof(float)), "y");
  check(cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "x up");
  std::reverse(host.begin(), host.end());
  check(cudaMemcpy(w, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "w up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::printf("%-42s %6s %5s %5s %8s %10s %9s %9s %s\n", "shape", "m", "n", "k", "kernel", "us", "GFLOP/s", "GB/s w",
              "bits");
  for (const Shape& s : shapes) {
    const size_t outs = static_cast<size_t>(s.m) * s.n;
    std::vector<float> first(outs), got(outs);
    const Fp32GemmKernel picked = fp32_gemm_kernel_for(x, s.m, w, s.n, s.k);
    for (Fp32GemmKernel kernel : {Fp32GemmKernel::tiles64, Fp32GemmKernel::skinny, Fp32GemmKernel::wide}) {
      float* out = kernel == Fp32GemmKernel::tiles64 ? y_first : y;
      launch_fp32_gemm_with(kernel, x, s.m, w, s.n, s.k, out, nullptr);  // warm-up
      std::vector<float> times;
      for (int i = 0; i < 15; ++i) {
        check(cudaEventRecord(start), "record");
        launch_fp32_gemm_with(kernel, x, s.m, w, s.n, s.k, out, nullptr);
        check(cudaEventRecord(stop), "record");
        check(cudaEventSynchronize(stop), "sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double us = times[times.size() / 2] * 1e3;
      const char* bits = "-";
      if (kernel == Fp32GemmKernel::tiles64) {
        check(cudaMemcpy(first.data(), y_first, outs * sizeof(float), cudaMemcpyDeviceToHost), "y down");
      } else {
        check(cudaMemcpy(got.data(), y, outs * sizeof(float), cudaMemcpyDeviceToHost), "y down");
        bits = std::memcmp(got.data(), first.data(), outs * sizeof(float)) == 0 ? "equal" : "DIFFER";
      }
      std::printf("%-42s %6d %5d %5d %8s%s %9.1f %9.0f %9.0f %s\n", s.what, s.m, s.n, s.k,
                  fp32_gemm_kernel_name(kernel), kernel == picked ? "*" : " ", us, 2.0 * s.m * s.n * s.k / us * 1e-3,
                  4.0 * s.n * s.k / us * 1e-3, bits);
    }
  }
  std::printf("* the kernel launch_fp32_gemm picks for the shape\n");
  return 0;
}
