// The GDN delta rule's GPU time (launch_gdn_delta_rule: the chunk matrices, the walk and the tail for prefill pieces,
// one kernel for decode rows, one for verify pieces of a few rows) at the Qwen3.5-9B shape (16 key heads, 32 value
// heads, 128/128), one layer, for a few step shapes, with a fingerprint of every output and state bit of a run from the
// initial state: a change to the kernels that is meant to keep every bit shows the same fingerprints before and after.
// Prefill pieces' chunks from a chunk's first row take the WY form (DUET_DELTA_WY=0: the row-by-row form instead).
// Run by hand on the GPU machine (not a test): bench_gdn_delta [REPS=20] [TEXT: only the cases whose name holds it]
// With DUET_WALK_CLOCK=1 it also prints where the walk's first block spends its cycles, phase by phase.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gdn_test_steps.h"

namespace duet::backend::cuda::gdn_testing {
namespace {

constexpr GdnDims kQwen9B{16, 32, 128, 128};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "bench_gdn_delta: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

struct Case {
  std::string name;
  std::vector<PieceSpec> pieces;
  int32_t decode_rows = kDecodePieceRows;  // 1: pieces of several rows in the chunked form (DUET_VERIFY_ROWS=chunked)
};

std::vector<Case> cases() {
  std::vector<Case> all;
  all.push_back({"prefill 1024 from 0", {{0, 1024, 0}}});
  all.push_back({"prefill 4096 from 0", {{0, 4096, 0}}});
  all.push_back({"prefill 1000 from 37", {{0, 1000, 37}}});
  all.push_back({"prefill 4 x 256", {{0, 256, 0}, {1, 256, 64}, {2, 256, 5}, {3, 256, 640}}});
  Case decode{"decode 64 rows", {}};
  for (int32_t i = 0; i < 64; ++i) decode.pieces.push_back({i, 1, 64 * (i % 5) + (i * 7) % 64});
  all.push_back(decode);
  // The rare row that completes its chunk (the fold) apart: none of 64, and all of them.
  Case none{"decode 64, no fold", {}}, every{"decode 64, all fold", {}};
  for (int32_t i = 0; i < 64; ++i) {
    none.pieces.push_back({i, 1, 64 * (i % 5) + (i * 7) % 63});
    every.pieces.push_back({i, 1, 64 * (i % 5) + 63});
  }
  all.push_back(none);
  all.push_back(every);
  // One stream's decode step, and sixteen's: few blocks, so their time is the kernel's latency.
  for (int32_t streams : {1, 16}) {
    Case few{"decode " + std::to_string(streams) + (streams == 1 ? " row" : " rows"), {}};
    for (int32_t i = 0; i < streams; ++i) few.pieces.push_back({i, 1, 64 * (i % 5) + (i * 7) % 64});
    all.push_back(few);
  }
  // Verify pieces (the last token and 3 drafts) of 1, 16 and 64 streams, inside their chunks, through the decode
  // kernels a row at a time and through the chunked form: the same fingerprints, two times.
  for (int32_t streams : {1, 16, 64}) {
    Case verify{"verify " + std::to_string(streams) + " x 4", {}};
    for (int32_t i = 0; i < streams; ++i) verify.pieces.push_back({i, 4, 64 * (i % 5) + (i * 7) % 59, true});
    all.push_back(verify);
    verify.name += " chunked";
    verify.decode_rows = 1;
    all.push_back(verify);
  }
  return all;
}

// The bytes a step's one-row pieces must read from their states, per layer: each value head's S_b and the chunk's
// earlier rows' keys, d and G (the decode kernels read nothing else that size; what they write is a row). Folds and
// pieces of several rows are left out, so the figure is a floor for the decode cases only.
double one_row_state_bytes(const std::vector<PieceSpec>& pieces, const GdnDims& d) {
  double floats = 0;
  for (const PieceSpec& p : pieces) {
    if (p.rows != 1) continue;
    const int32_t t = p.start % kDeltaChunk;
    floats += static_cast<double>(d.value_heads) *
              (static_cast<double>(d.key_dim) * d.value_dim + t * static_cast<double>(d.key_dim + d.value_dim + 1));
  }
  return floats * sizeof(float);
}

// Runs `launch` `reps` times with a phase clock set (`set`: set_walk_phase_clock_for_tests or
// set_dense_phase_clock_for_tests) and returns its counters' sums (zeros where no launch took that kernel).
template <typename Launch>
std::vector<unsigned long long> clocked_sums(int counters, void (*set)(unsigned long long*), int reps, Launch launch) {
  unsigned long long* sums = nullptr;
  check(cudaMalloc(&sums, counters * sizeof(unsigned long long)), "phase clock");
  check(cudaMemset(sums, 0, counters * sizeof(unsigned long long)), "phase clock");
  set(sums);
  for (int r = 0; r < reps; ++r) launch();
  check(cudaDeviceSynchronize(), "phase clock");
  set(nullptr);
  std::vector<unsigned long long> host(counters);
  check(cudaMemcpy(host.data(), sums, counters * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "phase clock");
  cudaFree(sums);
  return host;
}

// Prints each phase's cycles divided by `per` (launches or blocks) and its share of their sum.
void print_phases(const char* what, const std::vector<const char*>& names, const std::vector<unsigned long long>& sums,
                  double per) {
  unsigned long long total = 0;
  for (size_t p = 0; p < names.size(); ++p) total += sums[p];
  std::printf("%-22s %s:", "", what);
  for (size_t p = 0; p < names.size(); ++p)
    std::printf("  %s %.0f (%.1f%%)", names[p], static_cast<double>(sums[p]) / per, 100.0 * sums[p] / total);
  std::printf("\n");
}

// DUET_WALK_CLOCK=1: where the walk's first block spends its cycles, phase by phase (gdn_delta_rule.cu's
// walk_phase_clock), over `reps` more launches apart from the timed ones; cases with no walk print nothing.
// DUET_DENSE_CLOCK=1: where a dense decode block's cycles go (dense_phase_clock), the mean over every block of `reps`
// more launches; the A and Q entries' cycles are the first row's thread's, beside the column thread's phases (it
// waits for them in "entries' wait").
template <typename Launch>
void print_clocked_phases(int reps, Launch launch) {
  auto on = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == "1";
  };
  if (on("DUET_WALK_CLOCK")) {
    const std::vector<unsigned long long> sums = clocked_sums(6, set_walk_phase_clock_for_tests, reps, launch);
    if (sums[0] + sums[1] + sums[2] + sums[3] + sums[4] + sums[5] > 0)
      print_phases("walk block 0, cycles a launch",
                   {"copies' wait", "normalize", "issue copies", "S_b^T [k; q]", "d", "outputs + fold"}, sums, reps);
  }
  if (on("DUET_DENSE_CLOCK")) {
    const std::vector<unsigned long long> sums = clocked_sums(8, set_dense_phase_clock_for_tests, reps, launch);
    if (sums[7] > 0) {
      print_phases("dense block, mean cycles",
                   {"vectors", "normalize", "S_b^T [k; q]", "entries' wait", "d + output", "stores + norm"}, sums,
                   static_cast<double>(sums[7]));
      std::printf("%-22s A and Q entries (first row's thread) %.0f cycles; %llu blocks a launch\n", "",
                  static_cast<double>(sums[6]) / static_cast<double>(sums[7]), sums[7] / reps);
    }
  }
}

void run_case(const Case& c, int reps) {
  const GdnDims d = kQwen9B;
  const int32_t rows = total_rows(c.pieces);
  std::vector<uint64_t> seeds;
  for (size_t i = 0; i < c.pieces.size(); ++i) seeds.push_back(100 + i);
  const DeltaInputs in = random_delta_inputs(d, rows, 42);
  const DeviceDeltaInputs in_d(in);
  DeviceBuffer<float> out(static_cast<size_t>(rows) * value_width(d));

  // The fingerprint: one run from the initial state.
  uint64_t out_hash = 0, state_hash = 0;
  {
    States states(d, seeds);
    Step step(c.pieces, states, StepOptions{c.decode_rows, {}});
    launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                          out.get(), nullptr);
    check(cudaDeviceSynchronize(), c.name.c_str());
    const std::vector<float> o = out.download();
    out_hash = fnv1a(o.data(), o.size() * sizeof(float));
    state_hash = 1469598103934665603ull;
    const States::Snapshot now = states.now();
    for (size_t s = 0; s < c.pieces.size(); ++s) {
      const std::vector<float> st = now.delta(static_cast<int32_t>(s), kLayer);
      state_hash = fnv1a(st.data(), st.size() * sizeof(float), state_hash);
    }
  }

  // The timing: the same step again and again on one set of states (the values move on; the work does not).
  States states(d, seeds);
  Step step(c.pieces, states, StepOptions{c.decode_rows, {}});
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> ms;
  for (int r = 0; r < reps + 3; ++r) {
    check(cudaEventRecord(start), "record");
    launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                          out.get(), nullptr);
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), c.name.c_str());
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    if (r >= 3) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  const double median_s = ms[ms.size() / 2] / 1000.0;
  const double state_bytes = one_row_state_bytes(c.pieces, d);
  std::printf("%-22s rows %5d  median %8.1f us  min %8.1f us  (x24 layers: %6.2f ms)  out %016llx state %016llx",
              c.name.c_str(), rows, 1e6 * median_s, 1000 * ms[0], 24000 * median_s,
              static_cast<unsigned long long>(out_hash), static_cast<unsigned long long>(state_hash));
  if (state_bytes > 0)
    std::printf("  one-row state reads %.1f MB: %.0f GB/s", state_bytes / 1e6, state_bytes / median_s / 1e9);
  std::printf("\n");
  print_clocked_phases(reps, [&] {
    launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                          out.get(), nullptr);
  });
}

}  // namespace
}  // namespace duet::backend::cuda::gdn_testing

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line a case as it ends, even into a file a timeout may cut short
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  if (const std::string why = duet::testing::no_gpu_reason(); !why.empty()) {
    std::fprintf(stderr, "bench_gdn_delta: %s\n", why.c_str());
    return 1;
  }
  const std::string only = argc > 2 ? argv[2] : "";
  for (const auto& c : duet::backend::cuda::gdn_testing::cases())
    if (c.name.find(only) != std::string::npos) duet::backend::cuda::gdn_testing::run_case(c, reps);
  return 0;
}
