#pragma once
// y = x · w^T on the CPU in fp32. Every output element is one dot product accumulated in a fixed order (8 lanes
// over k, then a fixed pairwise sum), whatever m is and however the work is split across threads: a row's result
// depends only on that row, which is what row invariance needs.
#include <cstdint>

#include "backend/backend.h"

namespace duet::backend::cpu {

// x: [m, w.cols] fp32, y: [m, w.rows] fp32. Splits output features over the global thread pool.
void matmul(const float* x, int64_t m, const Weight& w, float* y);

// The dot product matmul uses for one element, exposed for tests and small per-row products.
float dot(const float* a, const float* b, int64_t k);

}  // namespace duet::backend::cpu
