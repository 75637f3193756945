// Replays tests/cuda/sampling_kernels_test.cu's parity cases on the cluster emulator (emu_runtime.h): the same rows
// (make_cases, copied from the test, same generator and order), one row per launch of one cluster, each row's id
// compared with the CPU sampler's (backend/cpu/sampler.cc). The emulator reports deadlocks and barrier sequences that
// differ between the threads of a cluster; the exit status is non-zero on any of them or on an id mismatch.
//   replay_kernels_test [VOCAB REPS SEED [FIRST LAST]]   (default: 512 8 1, the first test's 1,296 rows)
// Hooks from the environment: EMU_TILE_CAP=N, EMU_OLD=1 (old_top_p), EMU_STREAM=1 (force_stream). EMU_SMEM_RANDOM=S
// fills each block's shared memory with different random bytes first; EMU_EXP_SALT=S nudges exp (kernel.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/sampler.h"
#include "backend/cuda/sampling.h"
#include "emu_runtime.h"

using namespace duet::backend;
using namespace duet::backend::cuda;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float round_bf16(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  uint16_t bits;
  if (std::isnan(x)) {
    bits = 0x7fc0;
  } else {
    f += 0x7fff + ((f >> 16) & 1);
    bits = static_cast<uint16_t>(f >> 16);
  }
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &u, 4);
  return out;
}

struct Params : SamplingKnobs {
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
  int32_t top_logprobs = -1;
};
struct Case {
  std::vector<float> logits;
  Params params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  int64_t position = 0;
  std::string label;
};
enum class Kind { normal, bf16, few_values, all_equal, huge, masked };
const Kind kKinds[] = {Kind::normal, Kind::bf16, Kind::few_values, Kind::all_equal, Kind::huge, Kind::masked};
template <typename T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return *(values.begin() + static_cast<std::ptrdiff_t>(rng() % values.size()));
}
std::vector<float> make_logits(Kind kind, int32_t vocab, std::mt19937_64& rng, std::string& label) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(vocab));
  const auto at = [&] { return static_cast<size_t>(rng() % static_cast<uint64_t>(vocab)); };
  switch (kind) {
    case Kind::normal: {
      const float scale = pick(rng, {0.5f, 2.0f, 8.0f});
      for (float& x : v) x = scale * normal(rng);
      label = "normal*" + std::to_string(scale);
      break;
    }
    case Kind::bf16: {
      const float scale = pick(rng, {1.0f, 4.0f});
      for (float& x : v) x = round_bf16(scale * normal(rng));
      label = "bf16*" + std::to_string(scale);
      break;
    }
    case Kind::few_values: {
      const float values[] = {-1.5f, -0.5f, 0.0f, 0.75f, 2.0f};
      for (float& x : v) x = values[rng() % 5];
      label = "few_values";
      break;
    }
    case Kind::all_equal:
      std::fill(v.begin(), v.end(), 0.25f);
      label = "all_equal";
      break;
    case Kind::huge:
      for (float& x : v) x = normal(rng);
      if (rng() % 2 == 0) {
        v[at()] = 1e4f;
        v[at()] = 1e4f;
        v[at()] = 9999.0f;
        label = "huge_1e4";
      } else {
        v[at()] = 1e30f;
        label = "huge_1e30";
      }
      break;
    case Kind::masked:
      for (float& x : v) {
        const uint64_t r = rng() % 100;
        x = r < 30 ? -kInf : r < 31 ? kNaN : r < 33 ? 0.0f : r < 35 ? -0.0f : 2.0f * normal(rng);
      }
      label = "masked";
      break;
  }
  return v;
}
struct Recipe {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repetition;
  float presence;
  float frequency;
};
const Recipe kRecipes[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"greedy_penalties", 0.0f, 0, 1.0f, 0.0f, 1.3f, 0.4f, 0.2f},
    {"t1", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t0.7", 0.7f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1.5_k1", 1.5f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_k2", 1.0f, 2, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t0.8_k40", 0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_k3000", 1.0f, 3000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1.1_khalf", 1.1f, -2, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_kvocab-1", 1.0f, -1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_p0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t0.7_p0.5", 0.7f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1.2_p0.999", 1.2f, 0, 0.999f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_p0.05", 1.0f, 0, 0.05f, 0.0f, 1.0f, 0.0f, 0.0f},
    {"t1_minp0.05", 1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f},
    {"t1.5_minp0.2", 1.5f, 0, 1.0f, 0.2f, 1.0f, 0.0f, 0.0f},
    {"t1_minp1", 1.0f, 0, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f},
    {"t2_minp0.001", 2.0f, 0, 1.0f, 0.001f, 1.0f, 0.0f, 0.0f},
    {"t1_p0.9_minp0.5", 1.0f, 0, 0.9f, 0.5f, 1.0f, 0.0f, 0.0f},
    {"all", 0.9f, 50, 0.9f, 0.02f, 1.0f, 0.0f, 0.0f},
    {"all_big", 1.3f, -2, 0.95f, 0.001f, 1.0f, 0.0f, 0.0f},
    {"rep1.3", 1.0f, 0, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f},
    {"rep0.8_p0.9", 0.6f, 0, 0.9f, 0.0f, 0.8f, 0.0f, 0.0f},
    {"presence_frequency", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.5f, 0.3f},
    {"negative_presence_k20", 0.5f, 20, 1.0f, 0.0f, 1.0f, -0.5f, 1.0f},
    {"everything", 0.8f, 100, 0.92f, 0.01f, 1.2f, 0.3f, 0.2f},
    {"logit_bias", 0.9f, 0, 1.0f, 0.0f, 1.3f, 0.2f, 0.1f},
};
void add_logit_bias(Case& c) {
  std::map<int32_t, float> bias;
  const float shifts[] = {-100.0f, 2.5f, 100.0f};
  for (size_t i = 0; i < c.prompt.size() && i < 3; ++i) bias[c.prompt[i]] = shifts[i];
  if (!c.generated.empty()) bias[c.generated.front()] = -1.5f;
  bias[static_cast<int32_t>(c.logits.size()) - 1] = 3.0f;
  c.params.logit_bias.assign(bias.begin(), bias.end());
}
Params params_of(const Recipe& r, int32_t vocab, std::mt19937_64& rng) {
  Params p;
  p.temperature = r.temperature;
  p.top_k = r.top_k == -1 ? vocab - 1 : r.top_k == -2 ? vocab / 2 : r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.repetition_penalty = r.repetition;
  p.presence_penalty = r.presence;
  p.frequency_penalty = r.frequency;
  p.seed = rng();
  p.top_logprobs = pick(rng, {-1, 0, 1, 5, 20});
  return p;
}
void add_history(Case& c, std::mt19937_64& rng) {
  const auto vocab = static_cast<int32_t>(c.logits.size());
  std::vector<int32_t> best(c.logits.size());
  for (int32_t i = 0; i < vocab; ++i) best[static_cast<size_t>(i)] = i;
  const size_t keep = std::min<size_t>(8, best.size());
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(keep), best.end(),
                    [&](int32_t a, int32_t b) {
                      const float x = std::isnan(c.logits[a]) ? -kInf : c.logits[a],
                                  y = std::isnan(c.logits[b]) ? -kInf : c.logits[b];
                      return x > y || (x == y && a < b);
                    });
  const auto any = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  const auto likely = [&] { return best[rng() % keep]; };
  const size_t prompt = rng() % 40, generated = rng() % 20;
  for (size_t i = 0; i < prompt; ++i) c.prompt.push_back(rng() % 3 == 0 ? likely() : any());
  std::vector<int32_t> pool = {likely(), likely(), any(), any()};
  for (size_t i = 0; i < generated; ++i) c.generated.push_back(rng() % 2 == 0 ? pool[rng() % pool.size()] : any());
}
std::vector<Case> make_cases(int32_t vocab, int reps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Case> cases;
  for (int rep = 0; rep < reps; ++rep) {
    for (Kind kind : kKinds) {
      for (const Recipe& r : kRecipes) {
        Case c;
        std::string label;
        c.logits = make_logits(kind, vocab, rng, label);
        c.params = params_of(r, vocab, rng);
        c.position = static_cast<int64_t>(rng() % 100000);
        add_history(c, rng);
        if (std::string(r.name) == "logit_bias") add_logit_bias(c);
        c.label = label + "/" + r.name + " vocab " + std::to_string(vocab);
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}
std::vector<PenaltyEntry> penalty_entries(const Case& c) {
  std::map<int32_t, PenaltyEntry> by_id;
  for (int32_t id : c.prompt) {
    PenaltyEntry& e = by_id[id];
    e.id = id;
    e.in_prompt = 1;
  }
  for (int32_t id : c.generated) {
    PenaltyEntry& e = by_id[id];
    e.id = id;
    ++e.generated;
  }
  for (const auto& [id, bias] : c.params.logit_bias) {
    PenaltyEntry& e = by_id[id];
    e.id = id;
    e.bias = bias;
  }
  std::vector<PenaltyEntry> out;
  for (const auto& [id, e] : by_id) out.push_back(e);
  return out;
}
// engine::sample_spec, from the case's history.
SampleSpec cpu_spec(const Case& c) {
  SampleSpec spec;
  static_cast<SamplingKnobs&>(spec) = c.params;
  spec.top_logprobs = c.params.top_logprobs;
  spec.seed = c.params.seed;
  spec.position = c.position;
  const bool penalized =
      c.params.repetition_penalty != 1.0f || c.params.presence_penalty != 0.0f || c.params.frequency_penalty != 0.0f;
  std::map<int32_t, int32_t> generated;
  for (int32_t id : c.generated) ++generated[id];
  std::vector<int32_t> seen(c.prompt.begin(), c.prompt.end());
  seen.insert(seen.end(), c.generated.begin(), c.generated.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  if (penalized) {
    for (int32_t id : seen) spec.penalties.push_back({id, generated.count(id) ? generated[id] : 0, 1});
  }
  for (const auto& [id, bias] : c.params.logit_bias) {
    bool found = false;
    for (auto& p : spec.penalties) {
      if (p.id == id) {
        p.bias = bias;
        found = true;
      }
    }
    if (!found) spec.penalties.push_back({id, 0, 0, bias});
  }
  return spec;
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
  const std::vector<Case> cases = make_cases(vocab, reps, seed);
  size_t mismatches = 0, rows = 0;
  std::map<uint32_t, size_t> by_path;
  for (int i = first; i < static_cast<int>(cases.size()) && i <= last; ++i) {
    const Case& c = cases[static_cast<size_t>(i)];
    std::fprintf(stderr, "row %d: %s\n", i, c.label.c_str());
    const std::vector<PenaltyEntry> entries0 = penalty_entries(c);
    std::vector<PenaltyEntry> entries = entries0;
    entries.shrink_to_fit();
    if (entries.empty()) entries.push_back(PenaltyEntry{});
    SamplingRowParams r;
    static_cast<SamplingKnobs&>(r) = c.params;
    r.top_logprobs = c.params.top_logprobs;
    r.seed = c.params.seed;
    r.position = c.position;
    r.penalty_offset = 0;
    r.penalty_count = static_cast<int32_t>(entries0.size());
    DeviceSample out;
    std::vector<DeviceTopLogprob> top(kMaxTopLogprobs);
    const size_t bytes = sampling_scratch_bytes(1, vocab);
    void* scratch = std::aligned_alloc(256, bytes);  // exactly sampling_scratch_bytes (256 divides it)
    std::memset(scratch, 0xff, bytes);
    launch_sample(c.logits.data(), 1, vocab, &r, entries.data(), &out, top.data(), scratch, bytes, nullptr, hooks);
    std::free(scratch);
    const SampledRow want = cpu::sample_row(c.logits, cpu_spec(c));
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
