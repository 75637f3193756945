// Which cuBLASLt algorithm to pin for a prefill GEMM (issue 18's same-state decisions; backend/cuda/pinned_gemm.h):
// for each of the 9B's prefill projection shapes, every algorithm cuBLASLt's heuristic offers at m = 32,768 (the
// backend's pinned maximum) or at a few smaller m (the union, each accepted for every m the pinned GEMM is called
// with), timed at m = 383, 1,024 and 4,096 (median of 9 calls, CUDA events), and whether its first 383 rows at m =
// 4,096 equal the same rows at m = 383 bit for bit (row invariance, the pin's reason). The line marked "pinned" is
// PinnedGemm's own choice today. Not a test: numbers for docs/benchmarks.md.
//   bench_pinned_gemm [N K ...]   (default: the 9B's shapes)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/pinned_gemm.h"
#include "cublaslt_bench_gemm.h"

using duet::testing::check_lt;
using duet::testing::LtGemm;
using duet::testing::same_lt_algo;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {4096, 12288}, {12288, 4096}, {8192, 4096}, {4096, 4096}, {1024, 4096}};
  if (argc > 2) {
    shapes.clear();
    for (int i = 1; i + 1 < argc; i += 2) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  }
  constexpr int64_t kMaxM = 32768;  // the backend's kPinnedMaxRows
  const std::vector<int64_t> timed_m = {383, 1024, 4096};
  const size_t ws_bytes = size_t{64} << 20;  // the backend's kCublasWorkspaceBytes
  cublasLtHandle_t handle;
  check_lt(cublasLtCreate(&handle), "create");
  void* ws = nullptr;
  check(cudaMalloc(&ws, ws_bytes), "ws");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [n, k] : shapes) {
    std::vector<__nv_bfloat16> wh(n * k), xh(4096 * k);  // runs go up to 4,096 rows
    for (auto& v : wh) v = __float2bfloat16(normal(rng) * 0.02f);
    for (auto& v : xh) v = __float2bfloat16(normal(rng));
    void *wd, *xd, *yd, *yd2;
    check(cudaMalloc(&wd, wh.size() * 2), "w");
    check(cudaMalloc(&xd, xh.size() * 2), "x");
    check(cudaMalloc(&yd, 4096 * n * 2), "y");
    check(cudaMalloc(&yd2, 4096 * n * 2), "y2");
    check(cudaMemcpy(wd, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice), "w up");
    check(cudaMemcpy(xd, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), "x up");
    LtGemm g(handle, n, k, kMaxM);
    std::vector<cublasLtMatmulAlgo_t> all;
    for (int64_t m : {kMaxM, int64_t{4096}, int64_t{1024}, int64_t{383}, int64_t{128}})
      for (const auto& a : g.heuristic(m, ws_bytes))
        if (std::none_of(all.begin(), all.end(), [&](const auto& b) { return same_lt_algo(a, b); })) all.push_back(a);
    // PinnedGemm's own choice, for the "pinned" mark.
    duet::backend::cuda::PinnedGemm pinned(handle, n, k, kMaxM, false, ws, ws_bytes);
    std::printf("shape n %lld k %lld: %zu candidates; PinnedGemm: %s\n", static_cast<long long>(n),
                static_cast<long long>(k), all.size(), pinned.describe().c_str());
    std::printf("  %-80s %9s %9s %9s  %s\n", "algorithm", "us m=383", "m=1024", "m=4096", "rows 383 of 4096 = alone");
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "ev");
    check(cudaEventCreate(&stop), "ev");
    for (const auto& a : all) {
      bool ok = true;
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{65}, int64_t{383}, kMaxM})
        ok = ok && g.accepts(a, m, ws_bytes);
      if (!ok) continue;
      std::printf("  %-80s", duet::backend::cuda::describe_cublaslt_algo(a).c_str());
      for (int64_t m : timed_m) {
        std::vector<float> times;
        for (int r = 0; r < 11; ++r) {
          check(cudaEventRecord(start), "rec");
          g.run(a, m, wd, xd, yd, ws, ws_bytes);
          check(cudaEventRecord(stop), "rec");
          check(cudaEventSynchronize(stop), "sync");
          float ms = 0;
          check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
          if (r >= 2) times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        std::printf(" %9.1f", times[times.size() / 2] * 1e3);
      }
      g.run(a, 4096, wd, xd, yd, ws, ws_bytes);
      g.run(a, 383, wd, xd, yd2, ws, ws_bytes);
      check(cudaDeviceSynchronize(), "sync");
      std::vector<__nv_bfloat16> big(383 * n), small(383 * n);
      check(cudaMemcpy(big.data(), yd, big.size() * 2, cudaMemcpyDeviceToHost), "down");
      check(cudaMemcpy(small.data(), yd2, small.size() * 2, cudaMemcpyDeviceToHost), "down");
      std::printf("  %s\n", std::memcmp(big.data(), small.data(), big.size() * 2) == 0 ? "same" : "DIFF");
    }
    cudaFree(wd);
    cudaFree(xd);
    cudaFree(yd);
    cudaFree(yd2);
  }
  return 0;
}
