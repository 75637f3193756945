#pragma once
// The scalar functions of the forward pass, spelled as torch computes them in fp32.
#include <cmath>

namespace duet::backend::cpu {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20: the identity above the threshold.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace duet::backend::cpu
