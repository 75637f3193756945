// The sampler (the CPU backend's, backend/cpu/sampler.h, reached through the engine's translation of a request's
// settings, engine/sampler.h, as every step reaches it) against a plain reference written here from the definitions
// (not from sampler.cc): penalties on hand-computed logits, greedy = argmax, the filtered distributions exactly, and
// the seeded draws statistically over many positions.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "backend/cpu/sampler.h"
#include "backend/seeded_draw.h"

namespace duet::engine {
namespace {

// A slot's counts as the engine's updates leave them (counts_sync.h): each prompt id marked, each generated id counted.
backend::PenaltyCounts counts_of(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  backend::PenaltyCounts counts;
  for (int32_t id : prompt) counts.add(backend::CountsUpdate::Kind::prompt, id);
  for (int32_t id : generated) counts.add(backend::CountsUpdate::Kind::generated, id);
  return counts;
}

// The sampler's steps for a request's settings, through sample_spec as a step takes them.
using backend::cpu::Candidate;
std::vector<float> penalized_logits(std::span<const float> logits, const SamplingParams& p,
                                    const backend::PenaltyCounts& counts, std::span<const int32_t> extra = {}) {
  return backend::cpu::penalized_logits(logits, sample_spec(p, 0, 0, {}, extra), &counts);
}
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p,
                                           const backend::PenaltyCounts& counts) {
  return backend::cpu::sampling_candidates(logits, sample_spec(p, 0, 0), &counts);
}

// The reference: the full-vocabulary probability of each id after every transform, written the slow way.
std::vector<double> reference_distribution(std::vector<float> logits, const SamplingParams& p,
                                           const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  const size_t vocab = logits.size();
  std::vector<bool> seen(vocab, false);
  std::vector<int> count(vocab, 0);
  for (int32_t id : prompt) seen[id] = true;
  for (int32_t id : generated) seen[id] = true, ++count[id];
  for (size_t id = 0; id < vocab; ++id) {
    if (seen[id]) logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    if (count[id] > 0) logits[id] -= p.frequency_penalty * count[id] + p.presence_penalty;
  }
  std::vector<double> out(vocab, 0.0);
  if (p.temperature == 0) {
    out[std::max_element(logits.begin(), logits.end()) - logits.begin()] = 1;  // first maximum
    return out;
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab) order.resize(p.top_k);
  std::vector<double> prob(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += prob[i] = std::exp(double(logits[order[i]]) / p.temperature);
  for (double& q : prob) q /= total;
  size_t keep = order.size();
  if (p.top_p < 1) {
    double cumulative = 0;
    for (keep = 0; keep < order.size() && cumulative < p.top_p;) cumulative += prob[keep++];
  }
  const double max_prob = prob[0];
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (prob[i] >= p.min_p * max_prob) out[order[i]] = prob[i], kept += prob[i];
  }
  for (double& q : out) q /= kept;
  return out;
}

std::vector<double> dense(const std::vector<Candidate>& candidates, size_t vocab) {
  std::vector<double> out(vocab, 0.0);
  for (const Candidate& c : candidates) out[c.id] += c.probability;
  return out;
}

std::vector<float> random_logits(std::mt19937& rng, size_t vocab, float scale = 3.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(rng);
  return logits;
}

TEST(Sampler, PenaltiesOnHandComputedLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  // prompt {0, 1}; generated 2, 2, 0. Repetition over {0, 1, 2}: 2 -> 1, -1 -> -2, 0.5 -> 0.25.
  // Then id 0 (once): 1 - 0.25 - 0.5 = 0.25; id 2 (twice): 0.25 - 0.5 - 0.5 = -0.75. Ids 3, 4 untouched.
  const std::vector<float> out = penalized_logits(logits, p, counts_of({0, 1}, {2, 2, 0}));
  const std::vector<float> expected = {0.25f, -2.0f, -0.75f, 3.0f, 1.0f};
  ASSERT_EQ(out.size(), expected.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(out[i], expected[i]) << "id " << i;
}

// A verify row's earlier drafts (SampleSpec::extra_generated) count as generated on top of the slot's counts: an id
// counted there and repeated among the extras, one only in the prompt, one only among the extras, twice.
TEST(Sampler, ExtraGeneratedIdsCountOnTopOfTheSlotsCounts) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  const std::vector<int32_t> extra = {2, 0, 4, 4, 7};  // 7 is outside this vocabulary: skipped
  // Counts prompt {0, 1}, generated {2}; with the extras id 0 once, id 2 twice, id 4 twice. Repetition over
  // {0, 1, 2, 4}: 2 -> 1, -1 -> -2, 0.5 -> 0.25, 1 -> 0.5. Then id 0: 1 - 0.25 - 0.5 = 0.25; id 2: 0.25 - 0.5 - 0.5 =
  // -0.75; id 4: 0.5 - 0.5 - 0.5 = -0.5.
  const std::vector<float> out = penalized_logits(logits, p, counts_of({0, 1}, {2}), extra);
  EXPECT_EQ(out, (std::vector<float>{0.25f, -2.0f, -0.75f, 3.0f, -0.5f}));
  EXPECT_EQ(out, penalized_logits(logits, p, counts_of({0, 1}, {2, 2, 0, 4, 4})));
  // The control: without the extras, the same counts give other logits.
  EXPECT_NE(penalized_logits(logits, p, counts_of({0, 1}, {2})), out);
}

TEST(Sampler, PresenceAndFrequencyLookOnlyAtGeneratedTokens) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 1.0f;
  const std::vector<float> out = penalized_logits(std::vector<float>{1, 1, 1}, p, counts_of({0, 1, 2}, {1}));
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], -1.0f);
  EXPECT_FLOAT_EQ(out[2], 1.0f);
}

TEST(Sampler, LogitBiasIsAddedAfterThePenalties) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{1, 1.5f}, {3, -100.0f}, {9, 7.0f}};  // id 9 is outside this vocabulary: skipped
  // Id 1 (in the prompt): 3 / 2 + 1.5 = 3; id 3 (in the prompt): 4 / 2 - 100 = -98 (a bias before the penalty
  // would give (4 - 100) * 2 = -192).
  const std::vector<float> out = penalized_logits(std::vector<float>{0.5f, 3.0f, 1.0f, 4.0f}, p, counts_of({1, 3}, {}));
  EXPECT_EQ(out, (std::vector<float>{0.5f, 3.0f, 1.0f, -98.0f}));
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  std::mt19937 rng(3);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = random_logits(rng, 40);
    p.logit_bias = {{17, 100.0f}};
    EXPECT_EQ(sample_token(logits, p, {}, trial).id, 17);
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    p.temperature = 0;
    p.logit_bias = {{static_cast<int32_t>(best), -100.0f}};
    EXPECT_NE(sample_token(logits, p, {}, trial).id, best);
    p.temperature = 1.0f;
  }
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  std::mt19937 rng(1);
  SamplingParams p;
  p.temperature = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> logits = random_logits(rng, 50);
    const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sample_token(logits, p, {}, trial).id, expected);
  }
  EXPECT_EQ(sample_token(std::vector<float>{0, 5, 1, 5, 5}, p, {}, 0).id, 1);
}

TEST(Sampler, GreedyAppliesPenalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 4.0f;
  EXPECT_EQ(sample_token(std::vector<float>{1, 3, 2}, p, counts_of({1}, {}), 0).id, 2);  // 3 / 4 < 2
}

TEST(Sampler, CandidatesMatchTheReferenceDistribution) {
  std::mt19937 rng(7);
  struct Case {
    float temperature, top_p, min_p, repetition, presence, frequency;
    int32_t top_k;
  };
  const std::vector<Case> cases = {
      {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0},    {0.7f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
      {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 5},    {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
      {1.3f, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 10},   {1.0f, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f, 0},
      {0.8f, 0.95f, 0.05f, 1.2f, 0.3f, 0.2f, 20}, {2.0f, 0.3f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
      {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1},    {0.5f, 0.8f, 0.2f, 1.5f, -0.5f, 0.4f, 0},
  };
  const std::vector<int32_t> prompt = {3, 4, 5, 40};
  const std::vector<int32_t> generated = {5, 6, 6, 7, 41};
  for (size_t c = 0; c < cases.size(); ++c) {
    SamplingParams p;
    p.temperature = cases[c].temperature;
    p.top_p = cases[c].top_p;
    p.min_p = cases[c].min_p;
    p.top_k = cases[c].top_k;
    p.repetition_penalty = cases[c].repetition;
    p.presence_penalty = cases[c].presence;
    p.frequency_penalty = cases[c].frequency;
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> logits = random_logits(rng, 64);
      const std::vector<double> expected = reference_distribution(logits, p, prompt, generated);
      const std::vector<double> got = dense(sampling_candidates(logits, p, counts_of(prompt, generated)), 64);
      for (size_t id = 0; id < 64; ++id) {
        ASSERT_NEAR(got[id], expected[id], 1e-6) << "case " << c << " trial " << trial << " id " << id;
      }
    }
  }
}

// The sorted prefix grows in steps (256, 1024, ...): a flat distribution over a large vocabulary makes top-p
// reach deep into it, and the result must still be the full sort's.
TEST(Sampler, LargeVocabularyTopPMatchesTheReference) {
  std::mt19937 rng(21);
  const size_t vocab = 50000;
  for (float scale : {0.3f, 1.0f, 4.0f}) {
    const std::vector<float> logits = random_logits(rng, vocab, scale);
    for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f}) {
      SamplingParams p;
      p.top_p = top_p;
      const std::vector<double> expected = reference_distribution(logits, p, {}, {});
      const std::vector<double> got = dense(sampling_candidates(logits, p, {}), vocab);
      size_t support_expected = 0, support_got = 0;
      for (size_t id = 0; id < vocab; ++id) {
        support_expected += expected[id] > 0;
        support_got += got[id] > 0;
        ASSERT_NEAR(got[id], expected[id], 1e-9) << "scale " << scale << " top_p " << top_p << " id " << id;
      }
      EXPECT_EQ(support_got, support_expected) << "scale " << scale << " top_p " << top_p;
    }
  }
}

// Frequencies of the seeded draws over many positions against the reference probabilities.
void expect_draws_follow(const std::vector<float>& logits, const SamplingParams& p, int draws) {
  const std::vector<double> expected = reference_distribution(logits, p, {}, {});
  std::map<int32_t, int> seen;
  for (int position = 0; position < draws; ++position) ++seen[sample_token(logits, p, {}, position).id];
  for (size_t id = 0; id < logits.size(); ++id) {
    const double observed = seen.count(int32_t(id)) ? seen[int32_t(id)] : 0;
    const double mean = expected[id] * draws;
    if (expected[id] == 0) {
      EXPECT_EQ(observed, 0) << "id " << id << " was filtered out but drawn";
      continue;
    }
    const double sigma = std::sqrt(draws * expected[id] * (1 - expected[id]));
    EXPECT_NEAR(observed, mean, 5 * sigma + 1) << "id " << id << " p=" << expected[id];
  }
}

TEST(Sampler, SeededDrawsFollowTheDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};
  SamplingParams plain;
  plain.seed = 12345;
  expect_draws_follow(logits, plain, 40000);

  SamplingParams top_k = plain;
  top_k.top_k = 3;
  top_k.temperature = 0.8f;
  expect_draws_follow(logits, top_k, 40000);

  SamplingParams top_p = plain;
  top_p.top_p = 0.7f;
  expect_draws_follow(logits, top_p, 40000);

  SamplingParams min_p = plain;
  min_p.min_p = 0.2f;
  min_p.temperature = 1.5f;
  expect_draws_follow(logits, min_p, 40000);
}

TEST(Sampler, DrawsAcrossSeedsFollowTheDistribution) {
  const std::vector<float> logits = {1.0f, 0.0f, 0.5f, -1.0f};
  const std::vector<double> expected = reference_distribution(logits, SamplingParams{}, {}, {});
  std::vector<int> seen(4, 0);
  const int draws = 40000;
  for (int seed = 0; seed < draws; ++seed) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(seed);
    ++seen[sample_token(logits, p, {}, 17).id];  // one position, many seeds
  }
  for (size_t id = 0; id < 4; ++id) {
    const double sigma = std::sqrt(draws * expected[id] * (1 - expected[id]));
    EXPECT_NEAR(seen[id], expected[id] * draws, 5 * sigma) << "id " << id;
  }
}

TEST(Sampler, DrawIsAFunctionOfSeedAndPositionOnly) {
  std::mt19937 rng(3);
  const std::vector<float> logits = random_logits(rng, 100, 1.0f);
  SamplingParams p;
  p.seed = 99;
  std::vector<int32_t> first;
  for (int position = 0; position < 100; ++position) first.push_back(sample_token(logits, p, {}, position).id);
  for (int position = 99; position >= 0; --position) {  // any order, any interleaving: the same answers
    EXPECT_EQ(sample_token(logits, p, {}, position).id, first[position]);
  }
  p.seed = 100;
  int differing = 0;
  for (int position = 0; position < 100; ++position)
    differing += sample_token(logits, p, {}, position).id != first[position];
  EXPECT_GT(differing, 50);
  EXPECT_EQ(backend::seeded_uniform(99, 5), backend::seeded_uniform(99, 5));
  EXPECT_NE(backend::seeded_uniform(99, 5), backend::seeded_uniform(99, 6));
}

TEST(Sampler, TinyTopPAndTopKOneAreGreedy) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = random_logits(rng, 30);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    SamplingParams top_k;
    top_k.top_k = 1;
    top_k.seed = static_cast<uint64_t>(trial);
    EXPECT_EQ(sample_token(logits, top_k, {}, trial).id, argmax);
    SamplingParams top_p;
    top_p.top_p = 1e-6f;
    top_p.seed = static_cast<uint64_t>(trial);
    EXPECT_EQ(sample_token(logits, top_p, {}, trial).id, argmax);
  }
}

TEST(Sampler, NegativeInfinityAndNanAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 0.0f, std::nanf(""), 0.0f, -inf};
  SamplingParams p;
  for (int position = 0; position < 1000; ++position) {
    const int32_t id = sample_token(logits, p, {}, position).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  std::mt19937 rng(11);
  const std::vector<float> logits = random_logits(rng, 40);
  double max_logit = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float l : logits) sum += std::exp(l - max_logit);
  const double normalizer = max_logit + std::log(sum);

  SamplingParams p;
  p.temperature = 0.5f;  // transforms do not change what is reported
  p.top_k = 3;
  p.repetition_penalty = 1.5f;
  p.top_logprobs = 5;
  const SampledToken token = sample_token(logits, p, counts_of({0, 1, 2}, {}), 4);
  ASSERT_TRUE(token.logprob.has_value());
  EXPECT_NEAR(*token.logprob, logits[token.id] - normalizer, 1e-5);
  ASSERT_EQ(token.top_logprobs.size(), 5u);
  std::vector<int32_t> order(40);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(token.top_logprobs[i].id, order[i]);
    EXPECT_NEAR(token.top_logprobs[i].logprob, logits[order[i]] - normalizer, 1e-5);
  }
  SamplingParams none;
  none.top_logprobs = -1;
  EXPECT_FALSE(sample_token(logits, none, {}, 0).logprob.has_value());
  SamplingParams only_sampled;
  only_sampled.top_logprobs = 0;
  const SampledToken bare = sample_token(logits, only_sampled, {}, 0);
  EXPECT_TRUE(bare.logprob.has_value());
  EXPECT_TRUE(bare.top_logprobs.empty());
}

TEST(Sampler, TopLogprobTiesGoToTheLowestId) {
  const auto top = backend::cpu::raw_top_logprobs(std::vector<float>{1, 2, 2, 0, 2}, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 2);
  EXPECT_EQ(top[2].first, 4);
}

// A structured output's token mask: a draw never lands outside it, and among the allowed ids it follows the model's
// distribution renormalized over them (the reference: the same logits with the disallowed ones removed by hand).
TEST(Sampler, TokenMaskLimitsDrawsToAllowedIds) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(100);
  for (float& x : logits) x = normal(rng);
  std::vector<uint32_t> mask(4, 0);
  const std::vector<int32_t> allowed = {3, 17, 40, 41, 99};
  for (int32_t id : allowed) mask[id / 32] |= 1u << (id % 32);
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<int32_t, int> seen;
  const int draws = 20000;
  for (int position = 0; position < draws; ++position) ++seen[sample_token(logits, p, {}, position, mask).id];
  double total = 0;
  for (int32_t id : allowed) total += std::exp(static_cast<double>(logits[id]));
  for (const auto& [id, n] : seen) {
    ASSERT_TRUE(std::find(allowed.begin(), allowed.end(), id) != allowed.end()) << id;
    const double want = std::exp(static_cast<double>(logits[id])) / total;
    EXPECT_NEAR(static_cast<double>(n) / draws, want, 4 * std::sqrt(want * (1 - want) / draws) + 1e-3) << id;
  }
  // Greedy: the best allowed id, whatever is better outside the mask.
  p.temperature = 0;
  int32_t best = allowed[0];
  for (int32_t id : allowed)
    if (logits[id] > logits[best]) best = id;
  EXPECT_EQ(sample_token(logits, p, {}, 0, mask).id, best);
  // Planted control: without the mask the greedy draw is the global argmax, outside the allowed ids here.
  const auto argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  ASSERT_TRUE(std::find(allowed.begin(), allowed.end(), argmax) == allowed.end());
  EXPECT_EQ(sample_token(logits, p, {}, 0).id, argmax);
  // Logprobs stay the model's raw ones.
  p.top_logprobs = 0;
  EXPECT_FLOAT_EQ(*sample_token(logits, p, {}, 0, mask).logprob, backend::cpu::raw_logprob(logits, best));
}

}  // namespace
}  // namespace duet::engine
