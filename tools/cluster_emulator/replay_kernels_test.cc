// Replays tests/cuda/sampling_kernels_test.cc's parity cases on the cluster emulator (emu_runtime.h): the same rows
// (tests/cuda/sampling_cases.h, shared with the test), one row per launch of one cluster, each row's id compared with
// the CPU sampler's (backend/cpu/sampler.cc), its penalties reading its slot's count words, extras and biases. The
// emulator reports deadlocks and barrier sequences that differ between the threads of a cluster; the exit status is
// non-zero on any of them or on an id mismatch.
//   replay_kernels_test [VOCAB REPS SEED [FIRST LAST]]   (default: 512 8 1, the first test's 1,296 rows)
// Hooks from the environment: EMU_TILE_CAP=N, EMU_OLD=1 (old_top_p), EMU_STREAM=1 (force_stream), EMU_EXTRAS=K.
// EMU_SMEM_RANDOM=S fills each block's shared memory with different random bytes first; EMU_EXP_SALT=S nudges exp
// (kernel.cc).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/sampler.h"
#include "backend/cuda/sampling.h"
#include "emu_runtime.h"
#include "sampling_cases.h"

using namespace duet::backend;
using namespace duet::backend::cuda;
using duet::testing::sampling::Case;

namespace {
// Row 0 of a launch: its slot's counts as slot 0's words, its extras and biases at offset 0 (sampling_cases.h).
struct Launch {
  std::vector<uint32_t> counts;
  std::vector<int32_t> extra_ids;
  std::vector<BiasEntry> biases;
  SamplingRowParams row;
};
Launch launch_of(const Case& c) {
  Launch l;
  const SampleSpec spec = c.spec(0);
  l.counts = c.count_words();
  l.extra_ids.assign(c.extra.begin(), c.extra.end());
  for (const auto& [id, bias] : c.params.logit_bias) l.biases.push_back(BiasEntry{id, bias});
  l.extra_ids.push_back(0);  // a buffer to point at, past the row's own
  l.biases.push_back(BiasEntry{});
  static_cast<SamplingKnobs&>(l.row) = spec;
  l.row.top_logprobs = spec.top_logprobs;
  l.row.seed = spec.seed;
  l.row.position = spec.position;
  l.row.counts_slot = spec.counts_slot;
  l.row.extra_count = static_cast<int32_t>(spec.extra_generated.size());
  l.row.bias_count = static_cast<int32_t>(spec.logit_bias.size());
  return l;
}
}  // namespace

int main(int argc, char** argv) {
  const int32_t vocab = argc > 1 ? std::atoi(argv[1]) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 8;
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  const int first = argc > 4 ? std::atoi(argv[4]) : 0;
  const int last = argc > 5 ? std::atoi(argv[5]) : 1 << 30;
  SamplingTestHooks hooks;
  if (const char* e = std::getenv("EMU_TILE_CAP")) hooks.tile_cap = std::atoi(e);
  if (std::getenv("EMU_OLD")) hooks.old_top_p = true;
  if (std::getenv("EMU_STREAM")) hooks.force_stream = true;
  // EMU_EXTRAS=K: the same rows as verify rows, their last K generated ids extras instead of counted (the same draws).
  const char* extras = std::getenv("EMU_EXTRAS");
  std::vector<Case> cases = duet::testing::sampling::make_cases(vocab, reps, seed);
  if (extras != nullptr)
    for (Case& c : cases) c = c.with_extras(std::strtoul(extras, nullptr, 10));
  size_t mismatches = 0, rows = 0;
  std::map<uint32_t, size_t> by_path;
  for (int i = first; i < static_cast<int>(cases.size()) && i <= last; ++i) {
    const Case& c = cases[static_cast<size_t>(i)];
    std::fprintf(stderr, "row %d: %s\n", i, c.label.c_str());
    const Launch l = launch_of(c);
    DeviceSample out;
    std::vector<DeviceTopLogprob> top(kMaxTopLogprobs);
    const size_t bytes = sampling_scratch_bytes(1, vocab);
    void* scratch = std::aligned_alloc(256, bytes);  // exactly sampling_scratch_bytes (256 divides it)
    std::memset(scratch, 0xff, bytes);
    const PenaltyTables tables{l.counts.data(), vocab, l.extra_ids.data(), l.biases.data()};
    launch_sample(c.logits.data(), 1, vocab, &l.row, tables, &out, top.data(), scratch, bytes, nullptr, hooks);
    std::free(scratch);
    const SampledRow want = c.cpu();
    ++rows;
    ++by_path[out.path];
    if (out.id != want.id) {
      ++mismatches;
      std::printf("MISMATCH row %d %s: id %d cpu %d path 0x%x\n", i, c.label.c_str(), out.id, want.id, out.path);
    }
  }
  std::printf("%zu rows, %zu id mismatches; paths:", rows, mismatches);
  for (auto& [p, n] : by_path) std::printf(" 0x%x:%zu", p, n);
  std::printf("\n");
  if (emu_failures() != 0) std::printf("emulator: %d barrier failures\n", emu_failures());
  return mismatches != 0 || emu_failures() != 0 ? 1 : 0;
}
