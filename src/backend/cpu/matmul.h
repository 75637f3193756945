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

// y[j] = dot(x, rows + j * stride, k) for j < count, each bit for bit as dot() gives it (x is loaded once per eight
// rows): an attention head's scores over a page of keys.
void dot_rows(const float* x, const float* rows, int64_t stride, int64_t count, int64_t k, float* y);

// y[i] += p[j] * rows[j * stride + i] for j = 0, 1, ..., count - 1 in that order, i < k: each y[i] is rounded after
// every multiply and every add, exactly as that loop for one element alone (an attention head's weighted sum of
// a page of values, with y in registers instead of memory between rows).
void accumulate_rows(const float* p, const float* rows, int64_t stride, int64_t count, int64_t k, float* y);

// accumulate_rows for two heads that read the same rows (GQA): the same bits for each as two calls, each row loaded
// once.
void accumulate_rows2(const float* p0, const float* p1, const float* rows, int64_t stride, int64_t count, int64_t k,
                      float* y0, float* y1);

}  // namespace duet::backend::cpu
