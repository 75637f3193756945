#include "engine/sampler.h"

#include "backend/cpu/sampler.h"

namespace duet::engine {

backend::SampleSpec sample_spec(const SamplingParams& params, int32_t counts_slot, int64_t position,
                                AllowedTokens allowed, std::span<const int32_t> extra) {
  backend::SampleSpec spec;
  spec.allowed = allowed;
  static_cast<backend::SamplingKnobs&>(spec) = params;
  spec.top_logprobs = params.top_logprobs;
  spec.seed = params.seed;
  spec.position = position;
  if (penalized(params)) {
    spec.counts_slot = counts_slot;
    spec.extra_generated = extra;
  }
  spec.logit_bias = params.logit_bias;
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

SampledToken sample_token(std::span<const float> logits, const SamplingParams& params,
                          const backend::PenaltyCounts& counts, int64_t position, AllowedTokens allowed,
                          std::span<const int32_t> extra) {
  const backend::SampleSpec spec = sample_spec(params, 0, position, allowed, extra);
  return to_sampled_token(backend::cpu::sample_row(logits, spec, &counts), params);
}

}  // namespace duet::engine
