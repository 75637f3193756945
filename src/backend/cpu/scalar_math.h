#pragma once
// The scalar functions of the forward pass, spelled as torch computes them in fp32.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace duet::backend::cpu {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20: the identity above the threshold.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Attention weights in place: p = softmax(p * scale) over n scores, the maximum, the exponentials' sum and the
// divisions each in position order, so the bits depend on the scores alone.
inline void scaled_softmax(float* p, int64_t n, float scale) {
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    p[j] *= scale;
    top = std::max(top, p[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - top);
    sum += p[j];
  }
  for (int64_t j = 0; j < n; ++j) p[j] /= sum;
}

}  // namespace duet::backend::cpu
