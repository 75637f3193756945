#pragma once
// A sequence's sampling as the engine keeps it: the counts its penalties look at, its settings as the backend takes
// them (backend::SampleSpec) and the backend's answer as the engine's SampledToken. Every token is drawn by the
// backend, next to its logits (Backend::sample); what a draw means is written once, in the CPU backend's sampler
// (backend/cpu/sampler.h), which the CUDA sampler matches.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"

namespace duet::engine {

// Whether any penalty is on: the penalties are the only readers of a sequence's TokenCounts.
inline bool penalized(const SamplingParams& params) {
  return params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
}

// What the penalties look at: the ids seen in prompt + generated, each once, and how often each was generated, kept
// as the penalty entries themselves (in the order the ids were first seen), so that a step's SampleSpec copies them
// instead of rebuilding them from hash tables: 1.87 ms a step for 64 sequences of 1,000-token prompts on the dev
// machine (docs/benchmarks.md, twenty-third round). The samplers apply each id's entry alone, so the order is free.
class TokenCounts {
 public:
  void add_prompt(std::span<const int32_t> ids);
  void add_generated(int32_t id);
  // One entry a seen id: generated = times generated, in_prompt = 1 (seen in the prompt or generated), bias 0.
  std::span<const backend::SampleSpec::Penalty> entries() const { return entries_; }
  // Where an id's entry is, if it was seen.
  std::optional<size_t> index_of(int32_t id) const;

 private:
  backend::SampleSpec::Penalty& entry_for(int32_t id);

  std::unordered_map<int32_t, size_t> index_;
  std::vector<backend::SampleSpec::Penalty> entries_;
};

struct SampledToken {
  int32_t id = 0;
  std::optional<float> logprob;            // when params.top_logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, most likely first
};

// A token mask: bit (id % 32) of word (id / 32) set where the id is allowed (grammar/token_mask.h). Empty: none.
using AllowedTokens = std::span<const uint32_t>;

// What the backend needs to sample `position` of a sequence with these settings and counts: every id the penalties
// look at once (when a penalty is on), each logit_bias entry merged into its id's.
backend::SampleSpec sample_spec(const SamplingParams& params, const TokenCounts& counts, int64_t position,
                                AllowedTokens allowed = {});

SampledToken to_sampled_token(const backend::SampledRow& row, const SamplingParams& params);

// The token the CPU backend draws from these logits for these settings: sample_spec, then the CPU sampler, then
// to_sampled_token, as a step does it. For checking another backend's draws against the reference (the CUDA sampler's
// tests) and for tests; the engine itself only takes the backend's draws.
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, const TokenCounts& counts,
                          int64_t position, AllowedTokens allowed = {});

}  // namespace duet::engine
