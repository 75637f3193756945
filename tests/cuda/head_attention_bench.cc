// The joint head's attention over its memory rows on the device, unfolded (keys and values of every row,
// launch_fp32_gemm, then launch_attention) against folded (launch_folded_attention: the projections moved onto the
// queries), at the gate's head shape (width 1024, 16 heads of 64) with random weights: median GPU time of 15 calls
// after a warm-up, at nm memory rows (arguments, default 8192 and 16384) and nq queries (the decoder's 3-12
// questions, the routing's options up to 90). The query and out projections, the same on both paths, are left out.
// Also: the scores' product alone (launch_fp32_gemm, [nm, w] x [nq heads, w]^T), what the device head's rule picks
// (nq heads < w), the two outputs' largest difference relative to the output's largest value, each path's error on
// query 0's last head against a double-precision reference, whether a second folded call gives the same bits, and
// whether query 0's folded output alone (nq = 1) equals its output among the nq queries (it must: a query's result
// depends on its own row and the memory rows alone). Not a test: numbers for docs/benchmarks.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"
#include "decision/cuda/head_kernels.h"

using namespace duet::decision::cuda;
using duet::backend::cuda::launch_fp32_gemm;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

float* upload(const std::vector<float>& values) {
  float* p = nullptr;
  check(cudaMalloc(&p, values.size() * sizeof(float)), "alloc");
  check(cudaMemcpy(p, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), "up");
  return p;
}

std::vector<float> download(const float* p, size_t count) {
  std::vector<float> values(count);
  check(cudaMemcpy(values.data(), p, count * sizeof(float), cudaMemcpyDeviceToHost), "down");
  return values;
}

template <typename F>
double median_ms(F&& call) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  call();  // warm-up
  std::vector<float> times;
  for (int i = 0; i < 15; ++i) {
    check(cudaEventRecord(start), "record");
    call();
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// MultiheadAttention's core for one query row and one head in double: softmax(scale q_h k_j) v_j with k_j and v_j
// the head's projections of memory row j.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& memory, int64_t nm,
                              const std::vector<float>& wk, const std::vector<float>& bk, const std::vector<float>& wv,
                              const std::vector<float>& bv, int64_t width, int64_t d, int64_t head) {
  std::vector<double> scores(static_cast<size_t>(nm)), out(static_cast<size_t>(d), 0.0);
  std::vector<std::vector<double>> values(static_cast<size_t>(nm), std::vector<double>(static_cast<size_t>(d)));
  for (int64_t j = 0; j < nm; ++j) {
    const float* m = memory.data() + j * width;
    double score = 0;
    for (int64_t i = 0; i < d; ++i) {
      const int64_t row = head * d + i;
      double k = bk[row], v = bv[row];
      for (int64_t c = 0; c < width; ++c) {
        k += static_cast<double>(wk[row * width + c]) * m[c];
        v += static_cast<double>(wv[row * width + c]) * m[c];
      }
      score += static_cast<double>(q[row]) * k;
      values[j][i] = v;
    }
    scores[j] = score / std::sqrt(static_cast<double>(d));
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - top));
  for (int64_t j = 0; j < nm; ++j)
    for (int64_t i = 0; i < d; ++i) out[i] += scores[j] / sum * values[j][i];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int32_t width = 1024, heads = 16, d = width / heads;
  const int32_t query_counts[] = {1, 3, 6, 12, 32, 63, 65, 90};
  std::vector<int32_t> row_counts;
  for (int i = 1; i < argc; ++i) row_counts.push_back(std::atoi(argv[i]));
  if (row_counts.empty()) row_counts = {8192, 16384};
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  const int32_t max_queries = query_counts[std::size(query_counts) - 1];

  std::mt19937_64 rng(20261204);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](size_t count, float scale) {
    std::vector<float> v(count);
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  // Memory rows as a LayerNorm leaves them (unit scale), projections that keep that scale, queries whose scores
  // spread over a few units.
  const std::vector<float> memory = random(static_cast<size_t>(max_rows) * width, 1.0f);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(width));
  const std::vector<float> wk = random(static_cast<size_t>(width) * width, weight_scale);
  const std::vector<float> wv = random(static_cast<size_t>(width) * width, weight_scale);
  const std::vector<float> bk = random(width, 0.1f), bv = random(width, 0.1f);
  const std::vector<float> q = random(static_cast<size_t>(max_queries) * width, 0.5f);
  float* memory_d = upload(memory);
  float* u_d = upload(random(static_cast<size_t>(max_queries) * heads * width, 1.0f));  // the scores' product alone
  float *wk_d = upload(wk), *wv_d = upload(wv), *bk_d = upload(bk), *bv_d = upload(bv), *q_d = upload(q);
  float *k_d = nullptr, *v_d = nullptr, *unfolded_d = nullptr, *folded_d = nullptr, *scores_d = nullptr;
  check(cudaMalloc(&k_d, static_cast<size_t>(max_rows) * width * sizeof(float)), "k");
  check(cudaMalloc(&v_d, static_cast<size_t>(max_rows) * width * sizeof(float)), "v");
  check(cudaMalloc(&unfolded_d, static_cast<size_t>(max_queries) * width * sizeof(float)), "out");
  check(cudaMalloc(&folded_d, static_cast<size_t>(max_queries) * width * sizeof(float)), "out");
  check(cudaMalloc(&scores_d, static_cast<size_t>(max_rows) * max_queries * heads * sizeof(float)), "scores");
  size_t scratch_bytes = 0;
  for (int32_t rows : row_counts)
    for (int32_t nq : query_counts)
      scratch_bytes = std::max(scratch_bytes, folded_attention_scratch_bytes(nq, rows, width, heads));
  void* scratch = nullptr;
  check(cudaMalloc(&scratch, scratch_bytes), "scratch");

  std::printf("%6s %4s %5s %11s %11s %9s %7s %10s %10s %10s %5s %5s\n", "rows", "nq", "fold?", "unfolded ms",
              "folded ms", "scores ms", "speedup", "max rel", "err unfold", "err fold", "again", "alone");
  for (int32_t rows : row_counts) {
    const std::vector<double> want = reference(q, memory, rows, wk, bk, wv, bv, width, d, heads - 1);
    const auto error = [&](const std::vector<float>& got) {  // query 0's last head against the reference
      double worst = 0, scale = 0;
      for (int32_t i = 0; i < d; ++i) {
        worst = std::max(worst, std::fabs(got[static_cast<size_t>((heads - 1) * d + i)] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
      }
      return worst / scale;
    };
    for (int32_t nq : query_counts) {
      const FoldedAttention folded{.q = q_d,
                                   .queries = nq,
                                   .memory = memory_d,
                                   .rows = rows,
                                   .key_weight = wk_d,
                                   .key_bias = bk_d,
                                   .value_weight = wv_d,
                                   .value_bias = bv_d,
                                   .width = width,
                                   .heads = heads};
      const auto unfolded_call = [&] {
        launch_fp32_gemm(memory_d, rows, wk_d, width, width, k_d, nullptr);
        launch_bias_gelu(k_d, rows, width, bk_d, false, nullptr);
        launch_fp32_gemm(memory_d, rows, wv_d, width, width, v_d, nullptr);
        launch_bias_gelu(v_d, rows, width, bv_d, false, nullptr);
        launch_attention(q_d, nq, k_d, v_d, rows, width, heads, unfolded_d, nullptr);
      };
      const double unfolded_ms = median_ms(unfolded_call);
      const double folded_ms = median_ms([&] { launch_folded_attention(folded, scratch, folded_d, nullptr); });
      // The scores' product alone, on the same operands' shapes (the memory rows against nq heads rows of width).
      const double scores_ms =
          median_ms([&] { launch_fp32_gemm(memory_d, rows, u_d, nq * heads, width, scores_d, nullptr); });
      const size_t outs = static_cast<size_t>(nq) * width;
      const std::vector<float> unfolded = download(unfolded_d, outs), folded_out = download(folded_d, outs);
      double worst = 0, largest = 0;
      for (size_t i = 0; i < outs; ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(folded_out[i] - unfolded[i])));
        largest = std::max(largest, static_cast<double>(std::fabs(unfolded[i])));
      }
      launch_folded_attention(folded, scratch, folded_d, nullptr);
      const bool again = download(folded_d, outs) == folded_out;
      FoldedAttention one = folded;
      one.queries = 1;
      launch_folded_attention(one, scratch, folded_d, nullptr);
      const std::vector<float> alone = download(folded_d, width);
      const bool same_alone = std::equal(alone.begin(), alone.end(), folded_out.begin());
      std::printf("%6d %4d %5s %11.3f %11.3f %9.3f %6.2fx %10.3g %10.3g %10.3g %5s %5s\n", rows, nq,
                  static_cast<int64_t>(nq) * heads < width ? "yes" : "no", unfolded_ms, folded_ms, scores_ms,
                  unfolded_ms / folded_ms, worst / largest, error(unfolded), error(folded_out), again ? "same" : "DIFF",
                  same_alone ? "same" : "DIFF");
    }
  }
  // "alone": chunks of rows depend on nq heads (at least 2 nq heads rows, in steps of kFoldChunkRows): at 32 queries
  // or more (2 nq heads > 512) query 0 alone is summed in other chunks than among the nq, so its bits may differ.
  std::printf("fold? the device head's rule, nq heads < width; \"alone\" must read same up to nq = 16\n");
  return 0;
}
