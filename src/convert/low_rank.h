#pragma once
// A rank-r factorisation of a difference D [rows, cols] (fp32, row-major) by SVD, in the runtime adapter's convention:
// D ~ B A with A [r, cols] = the top r right singular vectors (orthonormal rows) and B [rows, r] = U_r S_r (the scale
// folded in), so (x A^T) B^T = x D_r^T.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace duet::convert {

// full: LAPACK's divide-and-conquer SVD of the whole D. randomized: a range finder (a Gaussian sketch of r +
// kOversample columns, kPowerIterations power iterations re-orthonormalised by QR) and the SVD of the small
// projection, which costs a few products with D instead of a full SVD. automatic: randomized when the sketch is
// smaller than D's full rank, else full (a projection smaller than the rank, like in_proj_a / in_proj_b).
enum class SvdMethod { automatic, full, randomized };
SvdMethod svd_method_from(std::string_view name);  // "auto", "full", "randomized"; refuses anything else

inline constexpr int64_t kOversample = 32;
inline constexpr int kPowerIterations = 2;

struct LowRank {
  int64_t rank = 0;
  std::vector<float> A;  // [rank, cols]
  std::vector<float> B;  // [rows, rank]
  bool randomized = false;
};

// rank is capped at min(rows, cols). `seed` fixes the sketch, so a run is reproducible.
LowRank factor_low_rank(std::span<const float> d, int64_t rows, int64_t cols, int64_t rank, SvdMethod method,
                        uint64_t seed = 0x5eed);

// product = B A [rows, cols].
void multiply_factors(std::span<const float> B, std::span<const float> A, int64_t rows, int64_t rank, int64_t cols,
                      float* product);

}  // namespace duet::convert
