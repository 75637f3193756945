// The decision head's fp32 products (launch_fp32_gemm): every kernel gives every output the bits of one fma chain
// over k in order from +0, computed here on the host with std::fmaf (IEEE fma, the same operation): so the kernels
// agree with each other bit for bit, a row's bits never depend on m, and the device head keeps the host head's
// products exactly. The planted control: the same chain summed in the reverse order must differ, so the comparisons
// can see an order the kernels must not take.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

namespace duet::backend::cuda {
namespace {

using ::duet::testing::same_bits;
using testing::DeviceBuffer;

struct Fp32Shape {
  int32_t m, n, k;
};

// Full-mantissa values of mixed magnitudes: a sum's bits then depend on its order.
std::vector<float> mixed_values(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-6, 6);
  std::vector<float> v(count);
  for (float& x : v) x = std::ldexp(unit(rng), scale(rng));
  return v;
}

// One output as the contract says: fmaf over k in order from +0, padded with zeros to a multiple of 16 as tiles64
// pads (only k % 16 != 0 shapes see the padding, and only tiles64 takes them).
float host_chain(const float* x, const float* w, int32_t k, bool reversed = false) {
  const int32_t padded = (k + 15) / 16 * 16;
  float acc = 0.0f;
  for (int32_t i = 0; i < padded; ++i) {
    const int32_t at = reversed ? padded - 1 - i : i;
    acc = at < k ? std::fmaf(x[at], w[at], acc) : std::fmaf(0.0f, 0.0f, acc);
  }
  return acc;
}

std::vector<float> run(Fp32GemmKernel kernel, const DeviceBuffer<float>& x, const Fp32Shape& s,
                       const DeviceBuffer<float>& w) {
  DeviceBuffer<float> y(static_cast<size_t>(s.m) * s.n);
  y.poison();
  launch_fp32_gemm_with(kernel, x.get(), s.m, w.get(), s.n, s.k, y.get(), nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return y.download();
}

class Fp32Gemm : public ::testing::TestWithParam<Fp32Shape> {};

TEST_P(Fp32Gemm, EveryKernelGivesTheHostChainsBits) {
  DUET_REQUIRE_GPU();
  const Fp32Shape s = GetParam();
  const std::vector<float> xh = mixed_values(static_cast<size_t>(s.m) * s.k, 11 + s.m);
  const std::vector<float> wh = mixed_values(static_cast<size_t>(s.n) * s.k, 29 + s.n);
  const DeviceBuffer<float> x(xh), w(wh);
  // Outputs checked against the host: all of them for small shapes, else an evenly spread sample with every edge.
  std::vector<std::pair<int32_t, int32_t>> picks;
  const bool all = static_cast<int64_t>(s.m) * s.n * s.k <= (int64_t{1} << 26);
  for (int32_t r = 0; r < s.m; ++r)
    for (int32_t c = 0; c < s.n; ++c)
      if (all || ((r * 7919 + c * 104729) % 997 == 0) || r == s.m - 1 || c == s.n - 1) picks.emplace_back(r, c);

  int kernels_run = 0;
  for (Fp32GemmKernel kernel : {Fp32GemmKernel::tiles64, Fp32GemmKernel::skinny, Fp32GemmKernel::wide}) {
    if (!fp32_gemm_kernel_fits(kernel, x.get(), w.get(), s.k)) continue;
    ++kernels_run;
    const std::vector<float> y = run(kernel, x, s, w);
    int64_t differing = 0, reversed_differing = 0;
    for (auto [r, c] : picks) {
      const float* xr = xh.data() + static_cast<size_t>(r) * s.k;
      const float* wr = wh.data() + static_cast<size_t>(c) * s.k;
      const float got = y[static_cast<size_t>(r) * s.n + c];
      if (!same_bits(got, host_chain(xr, wr, s.k))) {
        if (differing < 3)
          ADD_FAILURE() << fp32_gemm_kernel_name(kernel) << " (" << r << ", " << c << "): " << got << " against "
                        << host_chain(xr, wr, s.k);
        ++differing;
      }
      if (!same_bits(got, host_chain(xr, wr, s.k, true))) ++reversed_differing;
    }
    EXPECT_EQ(differing, 0) << fp32_gemm_kernel_name(kernel) << " m " << s.m << " n " << s.n << " k " << s.k;
    // The control: summed the other way round, a good share of the outputs has other bits (k >= 64 here).
    EXPECT_GT(reversed_differing, static_cast<int64_t>(picks.size()) / 10)
        << "the reversed chains agree: the comparison cannot see the order";
  }
  EXPECT_GE(kernels_run, 1);
}

INSTANTIATE_TEST_SUITE_P(HeadShapes, Fp32Gemm,
                         ::testing::Values(Fp32Shape{1, 1024, 4096}, Fp32Shape{6, 1024, 4096}, Fp32Shape{8, 4096, 1024},
                                           Fp32Shape{9, 1000, 1024}, Fp32Shape{33, 1030, 1024},
                                           Fp32Shape{136, 1024, 4096}, Fp32Shape{129, 1024, 1024},
                                           Fp32Shape{809, 1024, 1024}, Fp32Shape{2048, 1024, 4096},
                                           Fp32Shape{4100, 1030, 1024}, Fp32Shape{16, 48, 80}, Fp32Shape{70, 70, 72}),
                         [](const auto& info) {
                           return "m" + std::to_string(info.param.m) + "n" + std::to_string(info.param.n) + "k" +
                                  std::to_string(info.param.k);
                         });

// A row's bits do not depend on how many rows share the launch, nor on the kernel the shape picks.
TEST(Fp32GemmRows, ARowAloneEqualsTheSameRowAmongThousands) {
  DUET_REQUIRE_GPU();
  const Fp32Shape many{3000, 1024, 1024};
  const std::vector<float> xh = mixed_values(static_cast<size_t>(many.m) * many.k, 5);
  const std::vector<float> wh = mixed_values(static_cast<size_t>(many.n) * many.k, 6);
  const DeviceBuffer<float> x(xh), w(wh);
  EXPECT_EQ(fp32_gemm_kernel_for(x.get(), many.m, w.get(), many.n, many.k), Fp32GemmKernel::wide);
  DeviceBuffer<float> y_many(static_cast<size_t>(many.m) * many.n), y_one(many.n);
  launch_fp32_gemm(x.get(), many.m, w.get(), many.n, many.k, y_many.get(), nullptr);
  const std::vector<float> all = y_many.download();
  for (int32_t r : {0, 1, 127, 128, 1999, 2999}) {
    const float* row = x.get() + static_cast<size_t>(r) * many.k;
    ASSERT_EQ(fp32_gemm_kernel_for(row, 1, w.get(), many.n, many.k), Fp32GemmKernel::skinny);
    launch_fp32_gemm(row, 1, w.get(), many.n, many.k, y_one.get(), nullptr);
    const std::vector<float> one = y_one.download();
    EXPECT_EQ(std::memcmp(one.data(), all.data() + static_cast<size_t>(r) * many.n, one.size() * sizeof(float)), 0)
        << "row " << r;
  }
}

TEST(Fp32GemmKernels, ShapesPickTheirKernelAndOddOperandsTheFirst) {
  DUET_REQUIRE_GPU();
  const DeviceBuffer<float> x(4096 * 4 + 4), w(4096 * 4 + 4);
  EXPECT_EQ(fp32_gemm_kernel_for(x.get(), 6, w.get(), 1024, 4096), Fp32GemmKernel::skinny);
  EXPECT_EQ(fp32_gemm_kernel_for(x.get(), 16384, w.get(), 1024, 1024), Fp32GemmKernel::wide);
  EXPECT_EQ(fp32_gemm_kernel_for(x.get(), 600, w.get(), 1024, 1024), Fp32GemmKernel::tiles64);
  EXPECT_EQ(fp32_gemm_kernel_for(x.get(), 6, w.get(), 1024, 40), Fp32GemmKernel::tiles64);      // k % 16
  EXPECT_EQ(fp32_gemm_kernel_for(x.get() + 1, 6, w.get(), 1024, 64), Fp32GemmKernel::tiles64);  // misaligned
  EXPECT_THROW(launch_fp32_gemm_with(Fp32GemmKernel::wide, x.get() + 1, 6, w.get(), 16, 64, nullptr, nullptr),
               std::exception);
}

}  // namespace
}  // namespace duet::backend::cuda
