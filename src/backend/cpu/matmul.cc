#include "backend/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/weight_rows.h"
#include "base/thread_pool.h"

namespace duet::backend::cpu {

namespace {

constexpr int kLanes = 8;             // independent partial sums per dot product, in one 8-float vector
constexpr int64_t kColumnBlock = 16;  // weight rows converted to fp32 together and reused across all x rows

// Eight floats as one value: AVX2 code in the x86-64-v3 clone, two SSE halves in the default one, with the same
// per-lane arithmetic in both.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

inline float reduce_lanes(const Lanes& a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// y[j] = dot(x, w[j]) for four weight rows at once (x is loaded once); each element's arithmetic is exactly dot()'s.
// Inlined into each caller's clone, so the AVX2 clones run it as AVX2 code.
[[gnu::always_inline]] inline void dot4_body(const float* x, const float* w0, const float* w1, const float* w2,
                                             const float* w3, int64_t k, float* y) {
  Lanes a0 = {}, a1 = {}, a2 = {}, a3 = {}, xv, wv;
  const int64_t body = k / kLanes * kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    __builtin_memcpy(&xv, x + i, sizeof xv);
    __builtin_memcpy(&wv, w0 + i, sizeof wv);
    a0 += xv * wv;
    __builtin_memcpy(&wv, w1 + i, sizeof wv);
    a1 += xv * wv;
    __builtin_memcpy(&wv, w2 + i, sizeof wv);
    a2 += xv * wv;
    __builtin_memcpy(&wv, w3 + i, sizeof wv);
    a3 += xv * wv;
  }
  for (int64_t i = body; i < k; ++i) {
    const int l = static_cast<int>(i - body);
    a0[l] += x[i] * w0[i];
    a1[l] += x[i] * w1[i];
    a2[l] += x[i] * w2[i];
    a3[l] += x[i] * w3[i];
  }
  y[0] = reduce_lanes(a0);
  y[1] = reduce_lanes(a1);
  y[2] = reduce_lanes(a2);
  y[3] = reduce_lanes(a3);
}

// Eight dot products at once: rows[0..7] against x, eight accumulators (one per row, lanes as in dot()) in flight,
// then the eight reduce_lanes trees done side by side with shuffles: lane sums of neighbours, then of neighbouring
// pairs, then the two halves, so y[j] is reduce_lanes(acc_j) to the bit, in any clone. k is a multiple of kLanes
// (no tail: the accumulators stay in registers).
[[gnu::always_inline]] inline void dot8_body(const float* x, const float* rows, int64_t stride, int64_t k, float* y) {
  Lanes a[8], xv, wv;
  for (Lanes& acc : a) acc = Lanes{};
  for (int64_t i = 0; i < k; i += kLanes) {
    __builtin_memcpy(&xv, x + i, sizeof xv);
    for (int r = 0; r < 8; ++r) {
      __builtin_memcpy(&wv, rows + r * stride + i, sizeof wv);
      a[r] += xv * wv;
    }
  }
  // out = [p0+p1, p2+p3, q0+q1, q2+q3, p4+p5, p6+p7, q4+q5, q6+q7] for rows p and q (through a reference: a vector
  // returned by value would change the ABI of the default clone).
  const auto pairs = [](const Lanes& p, const Lanes& q, Lanes& out) {
    out = __builtin_shufflevector(p, q, 0, 2, 8, 10, 4, 6, 12, 14) +
          __builtin_shufflevector(p, q, 1, 3, 9, 11, 5, 7, 13, 15);
  };
  Lanes ab, cd, ef, gh, low, high;
  pairs(a[0], a[1], ab);
  pairs(a[2], a[3], cd);
  pairs(a[4], a[5], ef);
  pairs(a[6], a[7], gh);
  // [(r0+r1)+(r2+r3) for rows 0-3 | (r4+r5)+(r6+r7) for rows 0-3], and the same for rows 4-7.
  pairs(ab, cd, low);
  pairs(ef, gh, high);
  const Lanes sums = __builtin_shufflevector(low, high, 0, 1, 2, 3, 8, 9, 10, 11) +
                     __builtin_shufflevector(low, high, 4, 5, 6, 7, 12, 13, 14, 15);
  __builtin_memcpy(y, &sums, sizeof sums);
}

[[gnu::always_inline]] inline float dot_body(const float* a, const float* b, int64_t k) {
  Lanes acc = {}, av, bv;
  const int64_t body = k / kLanes * kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    __builtin_memcpy(&av, a + i, sizeof av);
    __builtin_memcpy(&bv, b + i, sizeof bv);
    acc += av * bv;
  }
  for (int64_t i = body; i < k; ++i) acc[i - body] += a[i] * b[i];
  return reduce_lanes(acc);
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] void dot4(const float* x, const float* w0, const float* w1,
                                                              const float* w2, const float* w3, int64_t k, float* y) {
  dot4_body(x, w0, w1, w2, w3, k, y);
}

// Four vectors of each head's y stay in registers while every row passes (named, not an array, which the compiler
// would keep in memory), each row loaded once for both heads; an element's sum is the same chain of roundings as the
// loop over j for that element alone (the backend compiles with -ffp-contract=off: a multiply and an add, in every
// clone). p1 and y1 may be null: one head.
[[gnu::always_inline]] inline void accumulate_body(const float* p0, const float* p1, const float* rows, int64_t stride,
                                                   int64_t count, int64_t k, float* y0, float* y1) {
  const bool two = p1 != nullptr;
  int64_t i = 0;
  for (; i + 4 * kLanes <= k; i += 4 * kLanes) {
    Lanes a0, a1, a2, a3, b0 = {}, b1 = {}, b2 = {}, b3 = {}, r0, r1, r2, r3;
    __builtin_memcpy(&a0, y0 + i, sizeof a0);
    __builtin_memcpy(&a1, y0 + i + kLanes, sizeof a1);
    __builtin_memcpy(&a2, y0 + i + 2 * kLanes, sizeof a2);
    __builtin_memcpy(&a3, y0 + i + 3 * kLanes, sizeof a3);
    if (two) {
      __builtin_memcpy(&b0, y1 + i, sizeof b0);
      __builtin_memcpy(&b1, y1 + i + kLanes, sizeof b1);
      __builtin_memcpy(&b2, y1 + i + 2 * kLanes, sizeof b2);
      __builtin_memcpy(&b3, y1 + i + 3 * kLanes, sizeof b3);
    }
    for (int64_t j = 0; j < count; ++j) {
      const float* row = rows + j * stride + i;
      __builtin_memcpy(&r0, row, sizeof r0);
      __builtin_memcpy(&r1, row + kLanes, sizeof r1);
      __builtin_memcpy(&r2, row + 2 * kLanes, sizeof r2);
      __builtin_memcpy(&r3, row + 3 * kLanes, sizeof r3);
      const float w0 = p0[j];
      a0 += w0 * r0;
      a1 += w0 * r1;
      a2 += w0 * r2;
      a3 += w0 * r3;
      if (two) {
        const float w1 = p1[j];
        b0 += w1 * r0;
        b1 += w1 * r1;
        b2 += w1 * r2;
        b3 += w1 * r3;
      }
    }
    __builtin_memcpy(y0 + i, &a0, sizeof a0);
    __builtin_memcpy(y0 + i + kLanes, &a1, sizeof a1);
    __builtin_memcpy(y0 + i + 2 * kLanes, &a2, sizeof a2);
    __builtin_memcpy(y0 + i + 3 * kLanes, &a3, sizeof a3);
    if (two) {
      __builtin_memcpy(y1 + i, &b0, sizeof b0);
      __builtin_memcpy(y1 + i + kLanes, &b1, sizeof b1);
      __builtin_memcpy(y1 + i + 2 * kLanes, &b2, sizeof b2);
      __builtin_memcpy(y1 + i + 3 * kLanes, &b3, sizeof b3);
    }
  }
  for (; i < k; ++i) {
    float sum = y0[i];
    for (int64_t j = 0; j < count; ++j) sum += p0[j] * rows[j * stride + i];
    y0[i] = sum;
    if (two) {
      sum = y1[i];
      for (int64_t j = 0; j < count; ++j) sum += p1[j] * rows[j * stride + i];
      y1[i] = sum;
    }
  }
}

}  // namespace

[[gnu::target_clones("arch=x86-64-v3", "default")]] float dot(const float* a, const float* b, int64_t k) {
  return dot_body(a, b, k);
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] void dot_rows(const float* x, const float* rows, int64_t stride,
                                                                  int64_t count, int64_t k, float* y) {
  int64_t j = 0;
  if (k % kLanes == 0)
    for (; j + 8 <= count; j += 8) dot8_body(x, rows + j * stride, stride, k, y + j);
  for (; j + 4 <= count; j += 4)
    dot4_body(x, rows + j * stride, rows + (j + 1) * stride, rows + (j + 2) * stride, rows + (j + 3) * stride, k,
              y + j);
  for (; j < count; ++j) y[j] = dot_body(x, rows + j * stride, k);
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] void accumulate_rows(const float* p, const float* rows,
                                                                         int64_t stride, int64_t count, int64_t k,
                                                                         float* y) {
  accumulate_body(p, nullptr, rows, stride, count, k, y, nullptr);
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] void accumulate_rows2(const float* p0, const float* p1,
                                                                          const float* rows, int64_t stride,
                                                                          int64_t count, int64_t k, float* y0,
                                                                          float* y1) {
  accumulate_body(p0, p1, rows, stride, count, k, y0, y1);
}

void matmul(const float* x, int64_t m, const Weight& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  global_thread_pool().parallel_for(static_cast<size_t>(blocks), [&](size_t begin, size_t end) {
    thread_local std::vector<float> converted;
    converted.resize(static_cast<size_t>(kColumnBlock * k));
    for (size_t block = begin; block < end; ++block) {
      const int64_t first = static_cast<int64_t>(block) * kColumnBlock;
      const int64_t count = std::min(kColumnBlock, n - first);
      const float* wf;
      if (w.type == WeightType::f32) {
        wf = static_cast<const float*>(w.data) + first * k;
      } else {
        weight_to_float(w, first * k, count * k, converted.data());
        wf = converted.data();
      }
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * k;
        float* yr = y + r * n + first;
        int64_t j = 0;
        for (; j + 4 <= count; j += 4)
          dot4(xr, wf + j * k, wf + (j + 1) * k, wf + (j + 2) * k, wf + (j + 3) * k, k, yr + j);
        for (; j < count; ++j) yr[j] = dot(xr, wf + j * k, k);
      }
    }
  });
}

}  // namespace duet::backend::cpu
