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
[[gnu::target_clones("arch=x86-64-v3", "default")]] void dot4(const float* x, const float* w0, const float* w1,
                                                              const float* w2, const float* w3, int64_t k, float* y) {
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

}  // namespace

[[gnu::target_clones("arch=x86-64-v3", "default")]] float dot(const float* a, const float* b, int64_t k) {
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
