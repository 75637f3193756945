// What sampling costs on the device (issue 16, "sampling at no cost"): launch_sample over rows of 248,320 logits, for
// 1, 16 and 64 rows, greedy and the settings users send (temperature 0.7 with top-p 0.9; top-k 40; min-p 0.05; with
// penalties), on two kinds of logits: flat ones like a random-weight model's (normal, sigma 1) and peaked ones like a
// trained model's (sigma 4, a few clear leaders). Prints the median time per call of 9 and the paths the rows took
// (SamplingPath bits: which of the kernel's routes decided them). Top-p and top-k settings run twice: with the weight
// bins (the default) and, on the line marked "old", the radix path alone (DUET_SAMPLING_TOPP=old), in the same process
// on the same logits, with the number of rows whose ids differ between the two (must be 0: both are the CPU's).
// The "stream" setting forces the slow stream path (SamplingTestHooks::force_stream) on every row: the sorted order
// from the weight bins at once, and on its "old" line tile by tile.
// Not a test: numbers for docs/benchmarks.md.
//   bench_sampling [--only KIND SETTING ROWS]   (one line of the table, e.g. for ncu: --only flat "t0.7 top_p 0.9" 1)
//   bench_sampling --logits FILE   (rows a real model produced: `DUET_DUMP_LOGITS=FILE:N duet serve ...` writes them;
//                                   each row alone, the seeded settings at 16 draws each, binned and old,
//                                   min/median/max)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/sampling.h"
#include "backend/penalty_counts.h"

using namespace duet::backend::cuda;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

std::string paths(uint32_t bits) {
  static const char* names[] = {"greedy", "nofinite",    "sorted", "tile",   "certified",
                                "stream", "exact_top_p", "empty",  "binned", "stream_bins"};
  std::string out;
  for (int i = 0; i < 10; ++i)
    if (bits & (1u << i)) out += std::string(out.empty() ? "" : "+") + names[i];
  return out;
}

struct Setting {
  const char* name;
  float temperature, top_p, min_p;
  int32_t top_k;
  bool penalties;
  int32_t top_logprobs = 0;   // the sampled token's logprob (a full log-sum-exp pass); -1: none, the server's default
  bool force_stream = false;  // the stream path (SamplingTestHooks::force_stream): the CPU's loops over the order
};

}  // namespace

// --logits FILE: every row of FILE (248,320 floats each) alone, at the seeded settings users send, 16 draws each
// (positions 0..15: the draw's u changes, so the bins gathered for it do), with the weight bins and old; the row's
// spread printed beside (a sampler's cost follows how many logits share a weight bin near the cut).
// The CPU sampler's top-p walk on one row (backend/cpu/sampler.cc, without top-k, min-p or penalties), and how close
// its two decisions came to going the other way: the cut (the running sum against top_p * total) and the draw (the
// running probability against u), each as the smallest relative distance from a running sum to its target. A row
// whose distance is within the kernel's bounds (about 1e-10) must take the slow stream path; a row far from them
// that takes it points at a bound that is looser than it needs to be.
void print_margins(const float* v, int32_t vocab, const SamplingRowParams& p) {
  std::vector<std::pair<float, int32_t>> order(static_cast<size_t>(vocab));
  float top = -INFINITY;
  for (int32_t i = 0; i < vocab; ++i) {
    order[i] = {v[i] / p.temperature, i};
    top = std::max(top, order[i].first);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  const auto weight = [&](size_t k) { return std::exp(static_cast<double>(order[k].first) - top); };
  double total = 0;
  for (int32_t i = 0; i < vocab; ++i) total += std::exp(static_cast<double>(v[i] / p.temperature) - top);
  const double target = static_cast<double>(p.top_p) * total;
  double cumulative = 0, cut_margin = INFINITY;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || cumulative < target)) {
    cumulative += weight(keep);
    cut_margin = std::min(cut_margin, std::abs(cumulative - target) / target);
    ++keep;
  }
  size_t ties = 0;
  for (size_t k = 1; k < keep + 2 && k < order.size(); ++k) ties += order[k].first == order[k - 1].first;
  const double u = static_cast<double>((([](uint64_t seed, int64_t position) {
                     auto mix = [](uint64_t x) {
                       x += 0x9e3779b97f4a7c15ULL;
                       x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
                       x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
                       return x ^ (x >> 31);
                     };
                     return mix(mix(seed) ^ static_cast<uint64_t>(position)) >> 11;
                   })(p.seed, p.position))) *
                   0x1.0p-53;
  double t2 = 0;
  for (size_t k = 0; k < keep; ++k) t2 += weight(k);
  double run = 0, draw_margin = INFINITY;
  size_t drawn = keep - 1;
  for (size_t k = 0; k < keep; ++k) {
    run += weight(k) / t2;
    draw_margin = std::min(draw_margin, std::abs(run - u) / std::max(u, 1e-300));
    if (u < run) {
      drawn = k;
      break;
    }
  }
  std::printf(
      "     cpu walk: keep %zu of %d (top_p %.3f, target %.6e of total %.6e), nearest running sum to the cut "
      "%.3e relative; u %.17g drew position %zu (id %d), nearest running probability %.3e relative; equal "
      "neighbours in the prefix %zu\n",
      keep, vocab, p.top_p, target, total, cut_margin, u, drawn, order[drawn].second, draw_margin, ties);
}

int bench_real_rows(const char* file, int32_t vocab) {
  std::FILE* f = std::fopen(file, "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", file);
    return 1;
  }
  std::vector<float> all;
  std::vector<float> row(static_cast<size_t>(vocab));
  while (std::fread(row.data(), sizeof(float), row.size(), f) == row.size())
    all.insert(all.end(), row.begin(), row.end());
  std::fclose(f);
  const int32_t rows = static_cast<int32_t>(all.size() / vocab);
  // FILE.params (DUET_DUMP_SLOW_ROWS): each row's own parameters, replayed at its seed and position.
  std::vector<SamplingRowParams> recorded;
  if (std::FILE* pf = std::fopen((std::string(file) + ".params").c_str(), "rb")) {
    SamplingRowParams p;
    while (std::fread(&p, sizeof(p), 1, pf) == 1) recorded.push_back(p);
    std::fclose(pf);
  }
  std::printf("%d rows of %d logits from %s\n", rows, vocab, file);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  float* logits = nullptr;
  check(cudaMalloc(&logits, sizeof(float) * vocab), "logits");
  SamplingRowParams* params = nullptr;
  check(cudaMalloc(&params, sizeof(SamplingRowParams)), "params");
  DeviceSample* out = nullptr;
  check(cudaMalloc(&out, sizeof(DeviceSample)), "out");
  DeviceTopLogprob* top = nullptr;
  check(cudaMalloc(&top, sizeof(DeviceTopLogprob) * kMaxTopLogprobs), "top");
  const size_t scratch_bytes = sampling_scratch_bytes(1, vocab);
  void* scratch = nullptr;
  check(cudaMalloc(&scratch, scratch_bytes), "scratch");
  struct Real {
    const char* name;
    float temperature, top_p;
  };
  const Real settings[] = {{"t0.8 top_p 0.95", 0.8f, 0.95f}, {"t0.7 top_p 0.9", 0.7f, 0.9f}};
  std::printf("%4s %8s %8s  %-16s %-4s %8s %8s %8s %8s  %s\n", "row", "max", "sigma", "setting", "path", "min us",
              "med us", "max us", "inside", "paths");
  for (int32_t r = 0; r < rows; ++r) {
    const float* v = all.data() + static_cast<size_t>(r) * vocab;
    double sum = 0, sq = 0;
    float mx = v[0];
    for (int32_t i = 0; i < vocab; ++i) {
      sum += v[i];
      sq += static_cast<double>(v[i]) * v[i];
      mx = std::max(mx, v[i]);
    }
    const double mean = sum / vocab, sigma = std::sqrt(std::max(0.0, sq / vocab - mean * mean));
    check(cudaMemcpy(logits, v, sizeof(float) * vocab, cudaMemcpyHostToDevice), "logits");
    if (static_cast<size_t>(r) < recorded.size()) {
      const SamplingRowParams& p = recorded[static_cast<size_t>(r)];
      std::printf(
          "%4d %8.3f %8.4f  recorded: temperature %g top_k %d top_p %g min_p %g seed %llu position %lld "
          "top_logprobs %d counts slot %d mask %lld\n",
          r, mx, sigma, p.temperature, p.top_k, p.top_p, p.min_p, static_cast<unsigned long long>(p.seed),
          static_cast<long long>(p.position), p.top_logprobs, p.counts_slot, static_cast<long long>(p.mask_offset));
      for (const bool old : {false, true}) {
        SamplingRowParams q = p;
        q.counts_slot = -1;  // the counts, extras and biases were not recorded (the bench's seeded rows have none)
        q.extra_count = q.bias_count = 0;
        q.mask_offset = -1;
        check(cudaMemcpy(params, &q, sizeof(q), cudaMemcpyHostToDevice), "params");
        SamplingTestHooks hooks;
        hooks.old_top_p = old;
        launch_sample(logits, 1, vocab, params, PenaltyTables{}, out, top, scratch, scratch_bytes, stream, hooks);
        DeviceSample result;
        check(cudaMemcpy(&result, out, sizeof(result), cudaMemcpyDeviceToHost), "out");
        std::printf("     replayed %s: id %d, %.1f us inside, %s\n", old ? "old " : "bins", result.id, result.ns / 1e3,
                    paths(result.path).c_str());
      }
      if (p.top_k == 0 && p.min_p == 0 && p.top_p < 1) print_margins(v, vocab, p);
    }
    for (const Real& s : settings) {
      for (const bool old : {false, true}) {
        SamplingTestHooks hooks;
        hooks.old_top_p = old;
        std::vector<float> times, inside;
        uint32_t all_bits = 0;
        for (int32_t position = -1; position < 16; ++position) {
          SamplingRowParams p;
          p.temperature = s.temperature;
          p.top_p = s.top_p;
          p.seed = 1234;
          p.position = std::max(position, 0);
          p.top_logprobs = -1;
          check(cudaMemcpy(params, &p, sizeof(p), cudaMemcpyHostToDevice), "params");
          cudaEvent_t a, b;
          cudaEventCreate(&a);
          cudaEventCreate(&b);
          cudaEventRecord(a, stream);
          launch_sample(logits, 1, vocab, params, PenaltyTables{}, out, top, scratch, scratch_bytes, stream, hooks);
          cudaEventRecord(b, stream);
          check(cudaEventSynchronize(b), "sample");
          float ms = 0;
          cudaEventElapsedTime(&ms, a, b);
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          DeviceSample result;
          check(cudaMemcpy(&result, out, sizeof(result), cudaMemcpyDeviceToHost), "out");
          if (position >= 0) {  // position -1: an untimed first call
            times.push_back(ms * 1000.0f);
            inside.push_back(result.ns / 1e3f);
            all_bits |= result.path;
          }
        }
        std::sort(times.begin(), times.end());
        std::sort(inside.begin(), inside.end());
        std::printf("%4d %8.3f %8.4f  %-16s %-4s %8.1f %8.1f %8.1f %8.1f  %s\n", r, mx, sigma, s.name,
                    old ? "old" : "bins", times.front(), times[times.size() / 2], times.back(),
                    inside[inside.size() / 2], paths(all_bits).c_str());
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--logits") return bench_real_rows(argv[2], 248320);
  const bool only = argc > 4 && std::string(argv[1]) == "--only";
  const int32_t vocab = 248320;
  const int32_t max_rows = 64;
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  float* logits = nullptr;
  check(cudaMalloc(&logits, sizeof(float) * vocab * max_rows), "logits");
  SamplingRowParams* params = nullptr;
  check(cudaMalloc(&params, sizeof(SamplingRowParams) * max_rows), "params");
  const int32_t seen_per_row = 1200;  // a 1K-token prompt's distinct ids and some generated ones
  uint32_t* counts = nullptr;         // [max_rows, vocab] count words, row r in slot r
  check(cudaMalloc(&counts, sizeof(uint32_t) * vocab * max_rows), "counts");
  BiasEntry* biases = nullptr;
  check(cudaMalloc(&biases, sizeof(BiasEntry) * (seen_per_row / 50) * max_rows), "biases");
  DeviceSample* out = nullptr;
  check(cudaMalloc(&out, sizeof(DeviceSample) * max_rows), "out");
  DeviceTopLogprob* top = nullptr;
  check(cudaMalloc(&top, sizeof(DeviceTopLogprob) * kMaxTopLogprobs * max_rows), "top");
  const size_t scratch_bytes = sampling_scratch_bytes(max_rows, vocab);
  void* scratch = nullptr;
  check(cudaMalloc(&scratch, scratch_bytes), "scratch");

  std::mt19937 rng(5);
  std::vector<uint32_t> host_counts(static_cast<size_t>(vocab) * max_rows, 0u);
  std::vector<BiasEntry> host_biases;
  for (size_t i = 0; i < static_cast<size_t>(seen_per_row) * max_rows; ++i) {
    const int32_t id = static_cast<int32_t>(i % seen_per_row) * 197 % vocab;
    host_counts[i / seen_per_row * vocab + id] = duet::backend::kCountsInPrompt | static_cast<uint32_t>(i % 3);
    if (i % 50 == 0) host_biases.push_back(BiasEntry{id, 1.5f});
  }
  check(cudaMemcpy(counts, host_counts.data(), host_counts.size() * sizeof(uint32_t), cudaMemcpyHostToDevice),
        "counts");
  check(cudaMemcpy(biases, host_biases.data(), host_biases.size() * sizeof(BiasEntry), cudaMemcpyHostToDevice),
        "biases");
  const PenaltyTables tables{counts, vocab, nullptr, biases};

  const std::vector<Setting> settings = {
      {"greedy", 0.0f, 1.0f, 0.0f, 0, false},
      {"t0.7 top_p 0.9", 0.7f, 0.9f, 0.0f, 0, false},
      {"t1.0 (plain)", 1.0f, 1.0f, 0.0f, 0, false},
      {"t0.8 top_k 40", 0.8f, 1.0f, 0.0f, 40, false},
      {"t0.8 min_p 0.05", 0.8f, 1.0f, 0.05f, 0, false},
      {"t0.7 top_p 0.9 + pen", 0.7f, 0.9f, 0.0f, 0, true},
      {"greedy, no logprobs", 0.0f, 1.0f, 0.0f, 0, false, -1},
      {"t0.7 top_p 0.9, no lp", 0.7f, 0.9f, 0.0f, 0, false, -1},
      // The rows whose top-p cut lies within the bounds (0.1% of a random model's seeded rows) as the stream path
      // takes them: the sorted order from the weight bins at once (stream_bins), and on the "old" line tile by tile
      // (a radix select and a sort per 2,048 positions: 77 tiles for a flat row's nucleus).
      {"t0.8 top_p 0.95 stream", 0.8f, 0.95f, 0.0f, 0, false, -1, true},
  };
  std::printf("%-8s %-22s %6s %12s  %s\n", "logits", "setting", "rows", "us per call", "paths");
  for (const char* kind : {"flat", "peaked"}) {
    std::vector<float> host(static_cast<size_t>(vocab) * max_rows);
    std::normal_distribution<float> normal(0.0f, std::string(kind) == "flat" ? 1.0f : 4.0f);
    for (auto& v : host) v = normal(rng);
    if (std::string(kind) == "peaked")
      for (int32_t r = 0; r < max_rows; ++r)
        for (int j = 0; j < 5; ++j) host[static_cast<size_t>(r) * vocab + (r * 31 + j * 977) % vocab] = 30.0f - 2 * j;
    check(cudaMemcpy(logits, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "logits");
    if (only && std::string(kind) != argv[2]) continue;
    for (const Setting& s : settings) {
      if (only && std::string(s.name) != argv[3]) continue;
      for (int32_t rows : {1, 16, 64}) {
        if (only && rows != std::atoi(argv[4])) continue;
        std::vector<SamplingRowParams> p(static_cast<size_t>(rows));
        for (int32_t r = 0; r < rows; ++r) {
          p[r].temperature = s.temperature;
          p[r].top_p = s.top_p;
          p[r].top_k = s.top_k;
          p[r].min_p = s.min_p;
          p[r].seed = 1234 + r;
          p[r].position = 77;
          p[r].top_logprobs = s.top_logprobs;
          if (s.penalties) {
            p[r].repetition_penalty = 1.1f;
            p[r].frequency_penalty = 0.2f;
            p[r].counts_slot = r;
            p[r].bias_offset = r * (seen_per_row / 50);
            p[r].bias_count = seen_per_row / 50;
          }
        }
        check(cudaMemcpy(params, p.data(), p.size() * sizeof(SamplingRowParams), cudaMemcpyHostToDevice), "params");
        // The median of 9 timed calls (after one untimed), and the rows' results.
        const auto measure = [&](const SamplingTestHooks& hooks, std::vector<DeviceSample>& results) {
          cudaEvent_t a, b;
          cudaEventCreate(&a);
          cudaEventCreate(&b);
          std::vector<float> times;
          for (int rep = 0; rep < 10; ++rep) {
            cudaEventRecord(a, stream);
            launch_sample(logits, rows, vocab, params, s.penalties ? tables : PenaltyTables{}, out, top, scratch,
                          scratch_bytes, stream, hooks);
            cudaEventRecord(b, stream);
            check(cudaEventSynchronize(b), "sample");
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            if (rep > 0) times.push_back(ms);
          }
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          std::sort(times.begin(), times.end());
          results.resize(static_cast<size_t>(rows));
          check(cudaMemcpy(results.data(), out, results.size() * sizeof(DeviceSample), cudaMemcpyDeviceToHost), "out");
          return times[times.size() / 2] * 1000.0f;
        };
        const auto all_paths = [](const std::vector<DeviceSample>& results) {
          uint32_t all = 0;
          for (const auto& r : results) all |= r.path;
          return paths(all);
        };
        std::vector<DeviceSample> results;
        SamplingTestHooks hooks;
        hooks.force_stream = s.force_stream;
        const float us = measure(hooks, results);
        std::printf("%-8s %-22s %6d %12.1f  %s\n", kind, s.name, rows, us, all_paths(results).c_str());
        if (s.top_p < 1.0f || s.top_k > 0) {
          SamplingTestHooks old = hooks;
          old.old_top_p = true;
          std::vector<DeviceSample> old_results;
          const float old_us = measure(old, old_results);
          int differ = 0;
          for (int32_t r = 0; r < rows; ++r) differ += results[r].id != old_results[r].id;
          std::printf("%-8s %-22s %6d %12.1f  %s (old; ids differing from the binned path's: %d)\n", kind, s.name, rows,
                      old_us, all_paths(old_results).c_str(), differ);
        }
      }
    }
  }
  return 0;
}
