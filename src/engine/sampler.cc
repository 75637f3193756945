#include "engine/sampler.h"

#include <unordered_map>

#include "backend/cpu/sampler.h"

namespace duet::engine {

void TokenCounts::add_prompt(std::span<const int32_t> ids) { seen_.insert(ids.begin(), ids.end()); }

void TokenCounts::add_generated(int32_t id) {
  seen_.insert(id);
  ++generated_[id];
}

backend::SampleSpec sample_spec(const SamplingParams& params, const TokenCounts& counts, int64_t position,
                                AllowedTokens allowed) {
  backend::SampleSpec spec;
  spec.allowed = allowed;
  static_cast<backend::SamplingKnobs&>(spec) = params;
  spec.top_logprobs = params.top_logprobs;
  spec.seed = params.seed;
  spec.position = position;
  if (penalized(params)) {
    // Every id seen (prompt or generated) once; the repetition penalty reads `seen`, the others `generated`.
    spec.penalties.reserve(counts.seen().size());
    for (int32_t id : counts.seen()) {
      const auto generated = counts.generated().find(id);
      spec.penalties.push_back({id, generated == counts.generated().end() ? 0 : generated->second, 1});
    }
  }
  if (!params.logit_bias.empty()) {
    // Each id once: a biased id the penalties already look at carries its bias on that entry.
    std::unordered_map<int32_t, size_t> at;
    for (size_t i = 0; i < spec.penalties.size(); ++i) at.emplace(spec.penalties[i].id, i);
    for (const auto& [id, bias] : params.logit_bias) {
      if (auto it = at.find(id); it != at.end())
        spec.penalties[it->second].bias = bias;
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
