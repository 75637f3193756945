#include "convert/low_rank.h"

#include <algorithm>
#include <random>

#include "base/error.h"
#include "convert/linear_algebra.h"

namespace duet::convert {

SvdMethod svd_method_from(std::string_view name) {
  if (name == "auto") return SvdMethod::automatic;
  if (name == "full") return SvdMethod::full;
  if (name == "randomized") return SvdMethod::randomized;
  fail("--svd {}: expected auto, full or randomized", name);
}

namespace {

// Replaces the columns of m [rows, cols] (rows >= cols) by an orthonormal basis of their span (thin QR).
void orthonormalize(std::vector<float>& m, int64_t rows, int64_t cols) {
  const LinearAlgebra& la = linear_algebra();
  std::vector<float> tau(static_cast<size_t>(cols));
  if (la.sgeqrf(LAPACK_ROW_MAJOR, rows, cols, m.data(), cols, tau.data()) != 0) fail("sgeqrf failed");
  if (la.sorgqr(LAPACK_ROW_MAJOR, rows, cols, cols, m.data(), cols, tau.data()) != 0) fail("sorgqr failed");
}

// Thin SVD of m [rows, cols] (destroyed): u [rows, k], s [k], vt [k, cols], k = min(rows, cols).
void thin_svd(std::vector<float>& m, int64_t rows, int64_t cols, std::vector<float>& u, std::vector<float>& s,
              std::vector<float>& vt) {
  const LinearAlgebra& la = linear_algebra();
  const int64_t k = std::min(rows, cols);
  u.resize(static_cast<size_t>(rows * k));
  s.resize(static_cast<size_t>(k));
  vt.resize(static_cast<size_t>(k * cols));
  const lapack_int info =
      la.sgesdd(LAPACK_ROW_MAJOR, 'S', rows, cols, m.data(), cols, s.data(), u.data(), k, vt.data(), cols);
  if (info != 0) fail("sgesdd failed on a [{}, {}] matrix (info {})", rows, cols, info);
}

// A = vt[:rank], B = u[:, :rank] * s[:rank].
LowRank truncate(const std::vector<float>& u, const std::vector<float>& s, const std::vector<float>& vt, int64_t rows,
                 int64_t k, int64_t cols, int64_t rank) {
  LowRank out;
  out.rank = rank;
  out.A.assign(vt.begin(), vt.begin() + rank * cols);
  out.B.resize(static_cast<size_t>(rows * rank));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rank; ++j) out.B[i * rank + j] = u[i * k + j] * s[j];
  return out;
}

LowRank full_svd(std::span<const float> d, int64_t rows, int64_t cols, int64_t rank) {
  std::vector<float> m(d.begin(), d.end()), u, s, vt;
  thin_svd(m, rows, cols, u, s, vt);
  return truncate(u, s, vt, rows, std::min(rows, cols), cols, rank);
}

LowRank randomized_svd(std::span<const float> d, int64_t rows, int64_t cols, int64_t rank, int64_t sketch,
                       uint64_t seed) {
  const LinearAlgebra& la = linear_algebra();
  const int64_t k = sketch;
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> omega(static_cast<size_t>(cols * k));  // [cols, k]
  for (float& v : omega) v = normal(engine);
  std::vector<float> y(static_cast<size_t>(rows * k));  // [rows, k] = D Ω, then its orthonormal basis Q
  la.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, k, cols, 1.0f, d.data(), cols, omega.data(), k, 0.0f,
           y.data(), k);
  orthonormalize(y, rows, k);
  std::vector<float>& z = omega;  // [cols, k] = D^T Q
  for (int i = 0; i < kPowerIterations; ++i) {
    la.sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, k, rows, 1.0f, d.data(), cols, y.data(), k, 0.0f, z.data(),
             k);
    orthonormalize(z, cols, k);
    la.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, k, cols, 1.0f, d.data(), cols, z.data(), k, 0.0f,
             y.data(), k);
    orthonormalize(y, rows, k);
  }
  std::vector<float> small(static_cast<size_t>(k * cols));  // [k, cols] = Q^T D
  la.sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, cols, rows, 1.0f, y.data(), k, d.data(), cols, 0.0f,
           small.data(), cols);
  std::vector<float> us, s, vt;
  thin_svd(small, k, cols, us, s, vt);                  // us [k, k]
  std::vector<float> u(static_cast<size_t>(rows * k));  // [rows, k] = Q us
  la.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, k, k, 1.0f, y.data(), k, us.data(), k, 0.0f, u.data(), k);
  LowRank out = truncate(u, s, vt, rows, k, cols, rank);
  out.randomized = true;
  return out;
}

}  // namespace

LowRank factor_low_rank(std::span<const float> d, int64_t rows, int64_t cols, int64_t rank, SvdMethod method,
                        uint64_t seed) {
  if (static_cast<int64_t>(d.size()) != rows * cols)
    fail("factor_low_rank: {} values for [{}, {}]", d.size(), rows, cols);
  if (rank < 1) fail("--rank {}: must be at least 1", rank);
  const int64_t full_rank = std::min(rows, cols);
  rank = std::min(rank, full_rank);
  const int64_t sketch = std::min(rank + kOversample, full_rank);
  const bool randomized = method == SvdMethod::randomized || (method == SvdMethod::automatic && sketch < full_rank);
  return randomized ? randomized_svd(d, rows, cols, rank, sketch, seed) : full_svd(d, rows, cols, rank);
}

void multiply_factors(std::span<const float> B, std::span<const float> A, int64_t rows, int64_t rank, int64_t cols,
                      float* product) {
  const LinearAlgebra& la = linear_algebra();
  la.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, rank, 1.0f, B.data(), rank, A.data(), cols, 0.0f,
           product, cols);
}

}  // namespace duet::convert
