#include "backend/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "backend/seeded_draw.h"

namespace duet::backend::cpu {

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// NaN would break the strict weak ordering the sorts rely on; a NaN logit is treated as impossible.
float sane(float logit) { return std::isnan(logit) ? kNegativeInfinity : logit; }

struct Scored {
  int32_t id;
  float logit;
};

// Most likely first, ties to the lowest id: a total order, so every sort gives one answer.
bool more_likely(const Scored& a, const Scored& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_logit = kNegativeInfinity;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = sane(logits[i]);
    if (logit > best_logit) {  // strict: the first (lowest) id wins ties
      best_logit = logit;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

double log_sum_exp(std::span<const float> logits) {
  float max_logit = kNegativeInfinity;
  for (float logit : logits) max_logit = std::max(max_logit, sane(logit));
  if (max_logit == kNegativeInfinity) return kNegativeInfinity;
  double sum = 0;
  for (float logit : logits) sum += std::exp(static_cast<double>(sane(logit)) - max_logit);
  return max_logit + std::log(sum);
}

// Steps 1 and 2 on one id whose count word is `word` plus `extra` generated.
void penalize(float& logit, const SampleSpec& spec, uint32_t word, uint32_t extra) {
  const uint32_t generated = (word & kCountsGenerated) + extra;
  if (spec.repetition_penalty != 1.0f && (word != 0 || generated > 0))
    logit = logit > 0 ? logit / spec.repetition_penalty : logit * spec.repetition_penalty;
  if ((spec.presence_penalty != 0.0f || spec.frequency_penalty != 0.0f) && generated > 0)
    logit -= spec.frequency_penalty * static_cast<float>(generated) + spec.presence_penalty;
}
}  // namespace

std::vector<float> penalized_logits(std::span<const float> logits, const SampleSpec& spec,
                                    const PenaltyCounts* counts) {
  std::vector<float> out(logits.begin(), logits.end());
  const auto vocab = static_cast<int32_t>(out.size());
  const auto inside = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  const bool penalties =
      spec.repetition_penalty != 1.0f || spec.presence_penalty != 0.0f || spec.frequency_penalty != 0.0f;
  if (penalties) {
    // Each id once, with its slot's word and its extras together (a verify row's drafts: usually none, then no map).
    std::unordered_map<int32_t, uint32_t> extra;
    for (int32_t id : spec.extra_generated) ++extra[id];
    if (counts != nullptr) {
      for (const auto& [id, word] : counts->words()) {
        if (!inside(id)) continue;
        uint32_t more = 0;
        if (!extra.empty()) {
          if (const auto it = extra.find(id); it != extra.end()) more = it->second, extra.erase(it);
        }
        penalize(out[id], spec, word, more);
      }
    }
    for (const auto& [id, more] : extra)
      if (inside(id)) penalize(out[id], spec, 0, more);
  }
  for (const auto& [id, bias] : spec.logit_bias)
    if (inside(id)) out[id] += bias;
  if (!spec.allowed.empty()) {
    for (size_t id = 0; id < out.size(); ++id) {
      const size_t word = id >> 5;
      if (word >= spec.allowed.size() || !((spec.allowed[word] >> (id & 31)) & 1u)) out[id] = kNegativeInfinity;
    }
  }
  return out;
}

// Sorts scored[done, end) far enough that its first `want` entries are the most likely, in order. Growing the
// sorted prefix only as far as top-p needs it avoids sorting a 150k vocabulary for every token; the prefix
// of a total order is unique, so the answer is the one a full sort gives.
size_t extend_sorted_prefix(std::vector<Scored>& scored, size_t done, size_t want) {
  want = std::min(want, scored.size());
  if (want <= done) return done;
  const auto begin = scored.begin() + static_cast<std::ptrdiff_t>(done);
  const auto middle = scored.begin() + static_cast<std::ptrdiff_t>(want);
  std::nth_element(begin, middle, scored.end(), more_likely);
  std::sort(begin, middle, more_likely);
  return want;
}

std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SampleSpec& spec,
                                           const PenaltyCounts* counts) {
  const SamplingKnobs& params = spec;
  const std::vector<float> penalized = penalized_logits(logits, spec, counts);
  if (params.temperature <= 0.0f) return {{argmax(penalized), 1.0}};

  std::vector<Scored> scored(penalized.size());
  float max_logit = kNegativeInfinity;
  for (size_t i = 0; i < penalized.size(); ++i) {
    scored[i] = {static_cast<int32_t>(i), sane(penalized[i]) / params.temperature};
    max_logit = std::max(max_logit, scored[i].logit);
  }
  if (max_logit == kNegativeInfinity) return {{argmax(penalized), 1.0}};  // nothing possible: fall back
  // Weights relative to the most likely token (weight 1), in double for a stable cumulative sum.
  const auto weight = [max_logit](const Scored& s) { return std::exp(static_cast<double>(s.logit) - max_logit); };

  // Only top-k and top-p need an order; without them candidates stay in id order (also deterministic).
  size_t sorted = 0;  // scored[0, sorted) holds the most likely tokens, in order
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < scored.size()) {
    sorted = extend_sorted_prefix(scored, 0, static_cast<size_t>(params.top_k));
    scored.resize(sorted);
  }
  size_t keep = scored.size();
  if (params.top_p < 1.0f) {
    double total = 0;
    for (const Scored& s : scored) total += weight(s);  // in a fixed order: id order, or top-k's sorted order
    const double target = static_cast<double>(params.top_p) * total;
    double cumulative = 0;
    keep = 0;
    while (keep < scored.size() && (keep == 0 || cumulative < target)) {
      if (keep == sorted) sorted = extend_sorted_prefix(scored, sorted, std::max<size_t>(256, 4 * sorted));
      cumulative += weight(scored[keep]);
      ++keep;
    }
  }

  std::vector<Candidate> candidates;
  candidates.reserve(keep);
  for (size_t i = 0; i < keep; ++i) {
    const double w = weight(scored[i]);
    // min-p: the most likely token has weight 1, so the threshold is min_p itself. Impossible tokens (weight
    // 0) stay out too, so a draw can only land on a possible one.
    if (w > 0 && w >= params.min_p) candidates.push_back({scored[i].id, w});
  }
  double total = 0;
  for (const Candidate& c : candidates) total += c.probability;
  for (Candidate& c : candidates) c.probability /= total;
  return candidates;
}

float raw_logprob(std::span<const float> logits, int32_t id) {
  return static_cast<float>(static_cast<double>(sane(logits[id])) - log_sum_exp(logits));
}

std::vector<std::pair<int32_t, float>> raw_top_logprobs(std::span<const float> logits, int32_t n) {
  const size_t count = std::min<size_t>(std::max(n, 0), logits.size());
  if (count == 0) return {};
  std::vector<Scored> scored(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scored[i] = {static_cast<int32_t>(i), sane(logits[i])};
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(count), scored.end(), more_likely);
  const double normalizer = log_sum_exp(logits);
  std::vector<std::pair<int32_t, float>> top(count);
  for (size_t i = 0; i < count; ++i) {
    top[i] = {scored[i].id, static_cast<float>(static_cast<double>(scored[i].logit) - normalizer)};
  }
  return top;
}

SampledRow sample_row(std::span<const float> logits, const SampleSpec& spec, const PenaltyCounts* counts) {
  const std::vector<Candidate> candidates = sampling_candidates(logits, spec, counts);
  SampledRow out;
  out.id = candidates.back().id;  // if rounding leaves the walk short, the last candidate takes the rest
  if (candidates.size() > 1) {
    const double target = seeded_uniform(spec.seed, spec.position);
    double cumulative = 0;
    for (const Candidate& c : candidates) {
      cumulative += c.probability;
      if (target < cumulative) {
        out.id = c.id;
        break;
      }
    }
  }
  if (spec.top_logprobs >= 0) {
    out.logprob = raw_logprob(logits, out.id);
    out.top = raw_top_logprobs(logits, spec.top_logprobs);
  }
  return out;
}

}  // namespace duet::backend::cpu
