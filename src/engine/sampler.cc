#include "engine/sampler.h"

#include <unordered_map>

#include "backend/cpu/sampler.h"

namespace duet::engine {

backend::SampleSpec::Penalty& TokenCounts::entry_for(int32_t id) {
  const auto [it, added] = index_.try_emplace(id, entries_.size());
  if (added) entries_.push_back({.id = id, .generated = 0, .in_prompt = 1, .bias = 0.0f});
  return entries_[it->second];
}

void TokenCounts::add_prompt(std::span<const int32_t> ids) {
  for (int32_t id : ids) entry_for(id);
}

void TokenCounts::add_generated(int32_t id) { ++entry_for(id).generated; }

std::optional<size_t> TokenCounts::index_of(int32_t id) const {
  const auto it = index_.find(id);
  return it == index_.end() ? std::nullopt : std::optional<size_t>(it->second);
}

backend::SampleSpec sample_spec(const SamplingParams& params, const TokenCounts& counts, int64_t position,
                                AllowedTokens allowed) {
  backend::SampleSpec spec;
  spec.allowed = allowed;
  static_cast<backend::SamplingKnobs&>(spec) = params;
  spec.top_logprobs = params.top_logprobs;
  spec.seed = params.seed;
  spec.position = position;
  // Every id seen (prompt or generated) once; the repetition penalty reads in_prompt, the others generated.
  const bool penalties = penalized(params);
  if (penalties) spec.penalties.assign(counts.entries().begin(), counts.entries().end());
  if (!params.logit_bias.empty()) {
    // Each id once: a biased id the penalties already look at carries its bias on that entry.
    spec.penalties.reserve(spec.penalties.size() + params.logit_bias.size());
    for (const auto& [id, bias] : params.logit_bias) {
      if (const std::optional<size_t> at = penalties ? counts.index_of(id) : std::nullopt)
        spec.penalties[*at].bias = bias;
      else
        spec.penalties.push_back({id, 0, 0, bias});
    }
  }
  return spec;
}

SampledToken to_sampled_token(const backend::SampledRow& row, const SamplingParams& params) {
  SampledToken token;
  token.id = row.id;
  if (params.top_logprobs >= 0) {
    token.logprob = row.logprob;
    for (const auto& [id, logprob] : row.top) token.top_logprobs.push_back(TokenLogprob{id, logprob});
  }
  return token;
}

SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, const TokenCounts& counts,
                          int64_t position, AllowedTokens allowed) {
  return to_sampled_token(backend::cpu::sample_row(logits, sample_spec(params, counts, position, allowed)), params);
}

}  // namespace duet::engine
