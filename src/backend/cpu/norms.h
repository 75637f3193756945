#pragma once
// RMS norms over one row, in fp32.
#include <cstdint>

#include "backend/backend.h"

namespace duet::backend::cpu {

// y = x * rsqrt(mean(x^2) + eps) * (1 + w): every Qwen3.5 norm except the GDN output norm. y may alias x.
void rms_norm_one_plus(const float* x, int64_t n, const Weight& w, float eps, float* y);
// The GDN output norm: y = (x * rsqrt(mean(x^2) + eps)) * w * silu(z), with a plain weight. y may alias x.
void rms_norm_gated(const float* x, const float* z, int64_t n, const Weight& w, float eps, float* y);
// x * rsqrt(sum(x^2) + eps) in place: the GDN q/k l2 norm.
void l2_normalize(float* x, int64_t n, float eps);

}  // namespace duet::backend::cpu
