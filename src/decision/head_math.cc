#include "decision/head_math.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/matmul.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::decision {

std::vector<float> layer_norm(std::span<const float> x, const LayerNormWeights& w) {
  const size_t width = w.weight.size();
  std::vector<float> y(x.size());
  for (size_t row = 0; row < x.size() / width; ++row) {
    const float* in = x.data() + row * width;
    float* out = y.data() + row * width;
    // The statistics in double: a little closer to exact than torch's fp32, never farther.
    double mean = 0;
    for (size_t i = 0; i < width; ++i) mean += in[i];
    mean /= static_cast<double>(width);
    double variance = 0;
    for (size_t i = 0; i < width; ++i) variance += (in[i] - mean) * (in[i] - mean);
    variance /= static_cast<double>(width);
    const auto inverse = static_cast<float>(1.0 / std::sqrt(variance + kLayerNormEps));
    for (size_t i = 0; i < width; ++i) out[i] = (in[i] - static_cast<float>(mean)) * inverse * w.weight[i] + w.bias[i];
  }
  return y;
}

namespace {
backend::Backend* products_backend = nullptr;
}  // namespace

void set_products_backend(backend::Backend* backend) { products_backend = backend; }

std::vector<float> linear(std::span<const float> x, const LinearWeights& w) {
  const int64_t in = w.weight.cols, out = w.weight.rows;
  if (x.size() % static_cast<size_t>(in) != 0) fail("joint head: {} inputs are not rows of {}", x.size(), in);
  const auto n = static_cast<int64_t>(x.size()) / in;
  std::vector<float> y(static_cast<size_t>(n * out));
  if (n == 0) return y;
  if (products_backend != nullptr) {
    products_backend->host_products(x.data(), n, w.weight, y.data());
  } else {
    backend::cpu::matmul(x.data(), n, w.weight, y.data());
  }
  if (!w.bias.empty())
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < out; ++j) y[static_cast<size_t>(r * out + j)] += w.bias[static_cast<size_t>(j)];
  return y;
}

void gelu(std::span<float> x) {
  for (float& v : x) v = 0.5f * v * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
}

void softmax(std::span<float> x) {
  if (x.empty()) return;
  const float top = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float& v : x) {
    v = std::exp(v - top);
    sum += v;
  }
  const auto inverse = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inverse;
}

void add_to(std::span<float> x, std::span<const float> y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

std::vector<float> attention(std::span<const float> query, std::span<const float> memory, const AttentionWeights& w,
                             int64_t heads) {
  const int64_t width = w.query.weight.rows;
  const int64_t d = width / heads;
  const int64_t nq = static_cast<int64_t>(query.size()) / width;
  const int64_t nm = static_cast<int64_t>(memory.size()) / width;
  const std::vector<float> q = linear(query, w.query);  // [nq, w]
  const std::vector<float> k = linear(memory, w.key);   // [nm, w]
  const std::vector<float> v = linear(memory, w.value);
  std::vector<float> mixed(static_cast<size_t>(nq * width));  // the heads' outputs side by side
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // One task per (head, query): each is independent and written to its own slice, so the split never matters.
  global_thread_pool().parallel_for(static_cast<size_t>(heads * nq), [&](size_t begin, size_t end) {
    std::vector<float> scores(static_cast<size_t>(nm));
    std::vector<float> sum(static_cast<size_t>(d));
    for (size_t task = begin; task < end; ++task) {
      const int64_t head = static_cast<int64_t>(task) / nq, i = static_cast<int64_t>(task) % nq;
      const float* qi = q.data() + i * width + head * d;
      backend::cpu::dot_rows(qi, k.data() + head * d, width, nm, d, scores.data());
      for (float& score : scores) score *= scale;
      softmax(scores);
      std::fill(sum.begin(), sum.end(), 0.0f);
      backend::cpu::accumulate_rows(scores.data(), v.data() + head * d, width, nm, d, sum.data());
      std::copy(sum.begin(), sum.end(), mixed.begin() + i * width + head * d);
    }
  });
  return linear(mixed, w.out);
}

}  // namespace duet::decision
