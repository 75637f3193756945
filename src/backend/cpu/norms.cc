#include "backend/cpu/norms.h"

#include <cmath>

#include "backend/cpu/matmul.h"
#include "backend/cpu/scalar_math.h"
#include "backend/cpu/weight_rows.h"

namespace duet::backend::cpu {

namespace {
float inverse_rms(const float* x, int64_t n, float eps) {
  const float mean_square = dot(x, x, n) / static_cast<float>(n);
  return 1.0f / std::sqrt(mean_square + eps);
}
}  // namespace

void rms_norm_one_plus(const float* x, int64_t n, const Weight& w, float eps, float* y) {
  const float r = inverse_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * (1.0f + weight_at(w, i));
}

void rms_norm_gated(const float* x, const float* z, int64_t n, const Weight& w, float eps, float* y) {
  const float r = inverse_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (weight_at(w, i) * (x[i] * r)) * silu(z[i]);
}

void l2_normalize(float* x, int64_t n, float eps) {
  const float r = 1.0f / std::sqrt(dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

}  // namespace duet::backend::cpu
