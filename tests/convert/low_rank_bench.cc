// Not a test: times `duet adapter`'s factorisation (convert/low_rank.h, rank 256, the automatic method) and the product
// of the factors it measures the residual with, on one matrix of each projection shape of Qwen3.5-9B, and multiplies
// by how many of each the model has, to estimate the tool's SVD time on the 9B shape. The estimate is an extrapolation
// from one matrix per shape; docs/benchmarks.md says so.
//   build/tests/convert/low_rank_bench [rank] [shape filter, e.g. 12288x4096]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "convert/low_rank.h"

int main(int argc, char** argv) {
  const int64_t rank = argc > 1 ? std::atoll(argv[1]) : 256;
  const std::string only = argc > 2 ? argv[2] : "";
  struct Shape {
    int64_t rows, cols, count;
    const char* what;
  };
  // Qwen3.5-9B: hidden 4096, 32 layers (24 GDN, 8 attention), FFN 12288; 248 projections.
  const std::vector<Shape> shapes = {{12288, 4096, 64, "mlp gate_proj, up_proj"},
                                     {4096, 12288, 32, "mlp down_proj"},
                                     {8192, 4096, 32, "GDN in_proj_qkv, attention q_proj"},
                                     {4096, 4096, 56, "GDN in_proj_z, out_proj, attention o_proj"},
                                     {1024, 4096, 16, "attention k_proj, v_proj"},
                                     {32, 4096, 48, "GDN in_proj_a, in_proj_b"}};
  double total = 0;
  int64_t modules = 0;
  for (const Shape& s : shapes) {
    const std::string name = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    if (!only.empty() && only != name) continue;
    // A difference like a fine-tune's: low-rank signal plus a full-rank floor of noise.
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> d(static_cast<size_t>(s.rows * s.cols));
    for (float& x : d) x = 1e-3f * normal(rng);
    const auto start = std::chrono::steady_clock::now();
    const duet::convert::LowRank f =
        duet::convert::factor_low_rank(d, s.rows, s.cols, rank, duet::convert::SvdMethod::automatic);
    // The tool also multiplies the stored factors back once, to measure the residual.
    std::vector<float> product(d.size());
    duet::convert::multiply_factors(f.B, f.A, s.rows, f.rank, s.cols, product.data());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-11s rank %-4lld %-10s %8.2f s  x %-3lld = %8.1f s  (%s)\n", name.c_str(),
                static_cast<long long>(f.rank), f.randomized ? "randomized" : "full", seconds,
                static_cast<long long>(s.count), seconds * static_cast<double>(s.count), s.what);
    total += seconds * static_cast<double>(s.count);
    modules += s.count;
  }
  std::printf("estimated SVD time for %lld projections: %.0f s (%.1f min), extrapolated from one matrix per shape\n",
              static_cast<long long>(modules), total, total / 60);
  return 0;
}
