#include "engine/backend_sampling.h"

namespace duet::engine {

backend::SampleSpec sample_spec(const SamplingParams& params, const TokenCounts& counts, int64_t position) {
  backend::SampleSpec spec;
  spec.temperature = params.temperature;
  spec.top_k = params.top_k;
  spec.top_p = params.top_p;
  spec.min_p = params.min_p;
  spec.repetition_penalty = params.repetition_penalty;
  spec.presence_penalty = params.presence_penalty;
  spec.frequency_penalty = params.frequency_penalty;
  spec.top_logprobs = params.top_logprobs;
  spec.seed = params.seed;
  spec.position = position;
  const bool penalized =
      params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  if (penalized) {
    // Every id seen (prompt or generated) once; the repetition penalty reads `seen`, the others `generated`.
    spec.penalties.reserve(counts.seen().size());
    for (int32_t id : counts.seen()) {
      const auto generated = counts.generated().find(id);
      spec.penalties.push_back({id, generated == counts.generated().end() ? 0 : generated->second, 1});
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

}  // namespace duet::engine
