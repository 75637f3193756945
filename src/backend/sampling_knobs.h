#pragma once
// The knobs that pick one row's next token, spelled once for the three places that carry them: a request's settings
// (engine::SamplingParams), a sampled row handed to a backend (backend::SampleSpec) and the CUDA kernel's row
// parameters (cuda::SamplingRowParams, plain data copied to the device). Semantics: backend/cpu/sampler.h.
#include <cstdint>

namespace duet::backend {

struct SamplingKnobs {
  float temperature = 1.0f;  // 0 (or below): greedy
  int32_t top_k = 0;         // 0 (or >= vocab): off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

}  // namespace duet::backend
