#pragma once
// The engine's sampling settings as a backend that samples next to its logits takes them (backend::SampleSpec), and
// its answer as the engine's SampledToken. The backend keeps sampler.h's semantics (the same token for the same
// logits, the draw keyed by (seed, position)); this file only translates.
#include <cstdint>

#include "backend/backend.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace duet::engine {

// What the backend needs to sample `position` of a sequence with these settings and counts. The ids the penalties
// look at go along only when a penalty is on.
backend::SampleSpec sample_spec(const SamplingParams& params, const TokenCounts& counts, int64_t position,
                                AllowedTokens allowed = {});

SampledToken to_sampled_token(const backend::SampledRow& row, const SamplingParams& params);

}  // namespace duet::engine
