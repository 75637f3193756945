#pragma once
// The joint head's operations over rows of fp32 in host memory, spelled as torch computes them: LayerNorm (eps
// 1e-5, biased variance, affine), exact (erf) GELU, Linear, softmax, and torch.nn.MultiheadAttention without masks.
#include <cstdint>
#include <span>
#include <vector>

#include "decision/joint_head.h"

namespace duet::decision {

constexpr float kLayerNormEps = 1e-5f;

// [n, width] rows normalised with `w` (width = w.weight.size()).
std::vector<float> layer_norm(std::span<const float> x, const LayerNormWeights& w);
// y = x W^T (+ b): x [n, in] -> [n, out].
std::vector<float> linear(std::span<const float> x, const LinearWeights& w);
// Where linear() computes its products: on the host (cpu::matmul) unless a backend with host products (the CUDA
// backend's, Backend::host_products) is set, once, before any head runs. Every product then goes the same way, so a
// row's bits never depend on how many rows shared its call.
void set_products_backend(backend::Backend* backend);
// 0.5 x (1 + erf(x / sqrt 2)), in place.
void gelu(std::span<float> x);
// In place over one row.
void softmax(std::span<float> x);
// x += y
void add_to(std::span<float> x, std::span<const float> y);
// MultiheadAttention(query, memory, memory): query [nq, w], memory [nm, w] -> [nq, w]; `heads` heads of w / heads,
// each scaled by 1 / sqrt(w / heads); every query sees every memory row.
std::vector<float> attention(std::span<const float> query, std::span<const float> memory, const AttentionWeights& w,
                             int64_t heads);

}  // namespace duet::decision
