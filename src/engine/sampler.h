#pragma once
// A sequence's sampling as the engine hands it over: its settings as the backend takes them (backend::SampleSpec, the
// penalties reading the counts its slot keeps in the backend's storage: engine/counts_sync.h) and the backend's answer
// as the engine's SampledToken. Every token is drawn by the backend, next to its logits (Backend::sample); what a draw
// means is written once, in the CPU backend's sampler (backend/cpu/sampler.h), which the CUDA sampler matches.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/penalty_counts.h"
#include "engine/request.h"

namespace duet::engine {

// Whether any penalty is on: the penalties are the only readers of a sequence's counts, and only such sequences have
// them kept (engine/counts_sync.h).
inline bool penalized(const SamplingParams& params) {
  return params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
}

struct SampledToken {
  int32_t id = 0;
  std::optional<float> logprob;            // when params.top_logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, most likely first
};

// A token mask: bit (id % 32) of word (id / 32) set where the id is allowed (grammar/token_mask.h). Empty: none.
using AllowedTokens = std::span<const uint32_t>;

// What the backend needs to sample `position` of a sequence with these settings: the slot whose counts its penalties
// read (ignored, -1, when no penalty is on), the ids generated before this row that the counts do not hold yet (a
// verify row's earlier drafts), and the logit_bias entries (a view of params', valid as long as they are).
backend::SampleSpec sample_spec(const SamplingParams& params, int32_t counts_slot, int64_t position,
                                AllowedTokens allowed = {}, std::span<const int32_t> extra = {});

SampledToken to_sampled_token(const backend::SampledRow& row, const SamplingParams& params);

// The token the CPU backend draws from these logits for these settings and counts: sample_spec, then the CPU sampler,
// then to_sampled_token, as a step does it. For checking another backend's draws against the reference (the CUDA
// sampler's tests) and for tests; the engine itself only takes the backend's draws.
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params,
                          const backend::PenaltyCounts& counts, int64_t position, AllowedTokens allowed = {},
                          std::span<const int32_t> extra = {});

}  // namespace duet::engine
