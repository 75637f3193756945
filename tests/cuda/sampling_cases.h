#pragma once
// The sampling parity cases shared by the device test (sampling_kernels_test.cc) and the cluster emulator's replay
// (tools/cluster_emulator/replay_kernels_test.cc): the same rows from the same generator in the same order, and what
// each row's penalties read as the engine hands it over (backend/penalty_counts.h: its slot's counts, its extra ids,
// its biases), with the CPU sampler's answer as the reference. Header only, no engine and no CUDA: the emulator builds
// it with g++ alone.
//
// Rows: normal logits at several scales, BF16-rounded logits (many exact ties), rows of five distinct values (ties
// everywhere), rows where every logit is equal (top-p sums land exactly on the target), rows with a few huge values,
// rows with -inf, NaN and signed zeros. Parameters: greedy, temperature alone, top-k (inside and beyond one tile),
// top-p, min-p, all together, each penalty, with prompt and generated ids, and logit_bias.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/sampler.h"
#include "backend/penalty_counts.h"
#include "base/bf16.h"

namespace duet::testing::sampling {

// A request's sampling as far as a row's draw goes (engine::SamplingParams without the engine).
struct CaseParams : backend::SamplingKnobs {
  std::vector<backend::LogitBias> logit_bias;
  uint64_t seed = 0;
  int32_t top_logprobs = -1;
};

struct Case {
  std::vector<float> logits;
  CaseParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;  // in order, with repeats: what the row's slot counts hold
  std::vector<int32_t> extra;      // generated after those, not in the counts (a verify row's earlier drafts)
  int64_t position = 0;
  std::string label;

  bool penalized() const {
    return params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  }
  // The slot's counts as the engine's updates leave them (engine/counts_sync.h).
  backend::PenaltyCounts counts() const {
    backend::PenaltyCounts c;
    for (int32_t id : prompt) c.add(backend::CountsUpdate::Kind::prompt, id);
    for (int32_t id : generated) c.add(backend::CountsUpdate::Kind::generated, id);
    return c;
  }
  // The same counts as a device storage keeps them: one word per id of the vocabulary.
  std::vector<uint32_t> count_words() const {
    std::vector<uint32_t> words(logits.size(), 0u);
    const backend::PenaltyCounts held = counts();  // alive through the loop (a temporary's words() would not be)
    for (const auto& [id, word] : held.words())
      if (id >= 0 && static_cast<size_t>(id) < words.size()) words[static_cast<size_t>(id)] = word;
    return words;
  }
  // What the engine hands the backend (engine::sample_spec): the counts at `slot` when a penalty is on.
  backend::SampleSpec spec(int32_t slot = 0) const {
    backend::SampleSpec s;
    static_cast<backend::SamplingKnobs&>(s) = params;
    s.top_logprobs = params.top_logprobs;
    s.seed = params.seed;
    s.position = position;
    if (penalized()) s.counts_slot = slot, s.extra_generated = extra;
    s.logit_bias = params.logit_bias;
    return s;
  }
  // The CPU sampler's draw: the reference every device row is compared with.
  backend::SampledRow cpu() const {
    const backend::PenaltyCounts c = counts();
    return backend::cpu::sample_row(logits, spec(), &c);
  }
  // The last `k` generated ids moved to the extras: the same history, so the same draw.
  Case with_extras(size_t k) const {
    Case c = *this;
    const size_t moved = std::min(k, c.generated.size());
    c.extra.assign(c.generated.end() - static_cast<std::ptrdiff_t>(moved), c.generated.end());
    c.generated.resize(c.generated.size() - moved);
    return c;
  }
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

enum class Kind { normal, bf16, few_values, all_equal, huge, masked };
inline constexpr Kind kKinds[] = {Kind::normal,    Kind::bf16, Kind::few_values,
                                  Kind::all_equal, Kind::huge, Kind::masked};

template <typename T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return *(values.begin() + static_cast<std::ptrdiff_t>(rng() % values.size()));
}

inline std::vector<float> make_logits(Kind kind, int32_t vocab, std::mt19937_64& rng, std::string& label) {
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
      for (float& x : v) x = round_to_bf16(scale * normal(rng));
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
        v[at()] = 1e4f;  // two equal maxima and a near one
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
  int32_t top_k;  // -1: vocab - 1, -2: vocab / 2
  float top_p;
  float min_p;
  float repetition;
  float presence;
  float frequency;
};
inline constexpr Recipe kRecipes[] = {
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
    {"t1_p0.9_minp0.5", 1.0f, 0, 0.9f, 0.5f, 1.0f, 0.0f, 0.0f},  // a wide nucleus that min-p cuts to a few
    {"all", 0.9f, 50, 0.9f, 0.02f, 1.0f, 0.0f, 0.0f},
    {"all_big", 1.3f, -2, 0.95f, 0.001f, 1.0f, 0.0f, 0.0f},
    {"rep1.3", 1.0f, 0, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f},
    {"rep0.8_p0.9", 0.6f, 0, 0.9f, 0.0f, 0.8f, 0.0f, 0.0f},
    {"presence_frequency", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.5f, 0.3f},
    {"negative_presence_k20", 0.5f, 20, 1.0f, 0.0f, 1.0f, -0.5f, 1.0f},
    {"everything", 0.8f, 100, 0.92f, 0.01f, 1.2f, 0.3f, 0.2f},
    {"logit_bias", 0.9f, 0, 1.0f, 0.0f, 1.3f, 0.2f, 0.1f},  // biases set by add_logit_bias
};

// OpenAI's logit_bias on ids the penalties also touch and on one they do not: a ban, a force, small shifts.
inline void add_logit_bias(Case& c) {
  std::map<int32_t, float> bias;
  const float shifts[] = {-100.0f, 2.5f, 100.0f};
  for (size_t i = 0; i < c.prompt.size() && i < 3; ++i) bias[c.prompt[i]] = shifts[i];
  if (!c.generated.empty()) bias[c.generated.front()] = -1.5f;
  bias[static_cast<int32_t>(c.logits.size()) - 1] = 3.0f;
  c.params.logit_bias.assign(bias.begin(), bias.end());
}

inline CaseParams params_of(const Recipe& r, int32_t vocab, std::mt19937_64& rng) {
  CaseParams p;
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

// Prompt ids and generated ids (with repeats), some of them among the most likely tokens so penalties matter.
inline void add_history(Case& c, std::mt19937_64& rng) {
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

inline std::vector<Case> make_cases(int32_t vocab, int reps, uint64_t seed) {
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

// The cases again as verify rows: up to 3 of each row's last generated ids are its extras instead of counted.
inline std::vector<Case> with_extras(const std::vector<Case>& cases) {
  std::vector<Case> out;
  for (const Case& c : cases) out.push_back(c.with_extras(3));
  return out;
}

}  // namespace duet::testing::sampling
