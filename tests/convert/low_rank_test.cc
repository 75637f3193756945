// The factorisation itself on synthetic matrices: an exact rank-k matrix is recovered at rank k, A's rows are
// orthonormal and B A is the best rank-r approximation (Eckart-Young: the residual is the tail of the spectrum), and
// the randomized range finder stays within 1% of the full SVD on a slowly decaying spectrum.
#include "convert/low_rank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace duet::convert {
namespace {

// M = U diag(s) V^T with random orthonormal-ish U, V (Gaussian, then Gram-Schmidt) and the given spectrum.
std::vector<float> with_spectrum(int64_t rows, int64_t cols, const std::vector<double>& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  auto orthonormal = [&](int64_t n, int64_t k) {
    std::vector<double> q(static_cast<size_t>(n * k));
    for (auto& x : q) x = normal(rng);
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t p = 0; p < j; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < n; ++i) dot += q[i * k + j] * q[i * k + p];
        for (int64_t i = 0; i < n; ++i) q[i * k + j] -= dot * q[i * k + p];
      }
      double norm = 0;
      for (int64_t i = 0; i < n; ++i) norm += q[i * k + j] * q[i * k + j];
      for (int64_t i = 0; i < n; ++i) q[i * k + j] /= std::sqrt(norm);
    }
    return q;
  };
  const auto k = static_cast<int64_t>(s.size());
  const auto u = orthonormal(rows, k), v = orthonormal(cols, k);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double x = 0;
      for (int64_t l = 0; l < k; ++l) x += u[i * k + l] * s[l] * v[j * k + l];
      m[i * cols + j] = static_cast<float>(x);
    }
  return m;
}

double residual(const std::vector<float>& m, const LowRank& f, int64_t rows, int64_t cols) {
  std::vector<float> p(m.size());
  multiply_factors(f.B, f.A, rows, f.rank, cols, p.data());
  double sum = 0;
  for (size_t i = 0; i < m.size(); ++i) sum += (static_cast<double>(m[i]) - p[i]) * (m[i] - p[i]);
  return std::sqrt(sum);
}

TEST(LowRank, RecoversAnExactRankKMatrixWithOrthonormalRows) {
  const int64_t rows = 200, cols = 120;
  const auto m = with_spectrum(rows, cols, {9, 5, 3, 2, 1.5, 1}, 1);
  for (SvdMethod method : {SvdMethod::full, SvdMethod::randomized}) {
    const LowRank f = factor_low_rank(m, rows, cols, 6, method);
    ASSERT_EQ(f.rank, 6);
    EXPECT_EQ(f.randomized, method == SvdMethod::randomized);
    EXPECT_LT(residual(m, f, rows, cols), 1e-4);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(f.A[i * cols + c]) * f.A[j * cols + c];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
      }
  }
}

TEST(LowRank, TruncationLeavesTheSpectrumsTail) {
  const int64_t rows = 150, cols = 90;
  std::vector<double> s;
  for (int i = 0; i < 40; ++i) s.push_back(std::pow(0.8, i));
  const auto m = with_spectrum(rows, cols, s, 2);
  const LowRank f = factor_low_rank(m, rows, cols, 10, SvdMethod::full);
  double tail = 0;
  for (size_t i = 10; i < s.size(); ++i) tail += s[i] * s[i];
  EXPECT_NEAR(residual(m, f, rows, cols), std::sqrt(tail), 1e-3 * std::sqrt(tail));
  // A control: the wrong rank is not the best one.
  const LowRank short_rank = factor_low_rank(m, rows, cols, 9, SvdMethod::full);
  EXPECT_GT(residual(m, short_rank, rows, cols), 1.2 * std::sqrt(tail));
}

TEST(LowRank, RandomizedWithinOnePercentOfFullOnASlowSpectrum) {
  const int64_t rows = 768, cols = 256, rank = 32;
  std::vector<double> s;
  for (int i = 0; i < 256; ++i) s.push_back(1.0 / std::sqrt(1.0 + i));  // slow decay, like a fine-tune's difference
  const auto m = with_spectrum(rows, cols, s, 3);
  const double full = residual(m, factor_low_rank(m, rows, cols, rank, SvdMethod::full), rows, cols);
  const LowRank sketched = factor_low_rank(m, rows, cols, rank, SvdMethod::automatic);
  EXPECT_TRUE(sketched.randomized);
  const double randomized = residual(m, sketched, rows, cols);
  std::printf("rank %lld of [%lld, %lld]: full SVD residual %.6f, randomized %.6f (%.3f%%)\n",
              static_cast<long long>(rank), static_cast<long long>(rows), static_cast<long long>(cols), full,
              randomized, 100.0 * (randomized / full - 1.0));
  EXPECT_LE(randomized, 1.01 * full);
  EXPECT_GE(randomized, full * (1 - 1e-5));  // never better than the optimum
}

TEST(LowRank, RefusesARankBelowOne) {
  EXPECT_ANY_THROW(factor_low_rank(std::vector<float>(4, 1.0f), 2, 2, 0, SvdMethod::full));
}

}  // namespace
}  // namespace duet::convert
