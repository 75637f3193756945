#pragma once
// The CPU backend's sampler (Backend::sample): picks a row's next token from its logits by the row's SampleSpec. A
// pure function of (logits, spec): no state shared between rows, so a row samples the same token whatever else is in
// the step. It is the reference the CUDA sampler (cuda/sampling.cu) is checked against.
//
// Order of transforms (the same for every row), over the counts of the row's sequence (penalty_counts.h: the slot's
// words, plus one generated for each of spec.extra_generated):
//   1. repetition penalty, Hugging Face style, over every id seen in prompt + generated (a nonzero count word): a
//      positive logit is divided by the penalty, a negative one multiplied;
//   2. presence and frequency penalties, OpenAI style, over generated ids only (count = times generated > 0):
//      logit -= frequency * count + presence;
//   2b. logit_bias: logit += bias, for each of spec.logit_bias in order;
//   2c. a structured output's token mask (src/grammar): every id whose bit is clear becomes -inf, so the draw below
//       only lands on tokens that keep the document valid (an empty mask span: no mask);
//   3. temperature 0: the argmax (ties to the lowest id) and stop here; otherwise logits / temperature;
//   4. top-k (k most likely), then top-p (smallest most-likely prefix reaching p of the remaining mass), then
//      min-p (drop tokens below min_p times the most likely one's probability);
//   5. one draw u = seeded_uniform(seed, position) over what is left, walked in a fixed order.
// Candidates are ordered by (logit descending, id ascending), so ties never depend on sort internals.
//
// Logprobs are the log-softmax of the model's raw logits, before any of the transforms above (as OpenAI and
// vLLM report them by default): they describe the model, not the sampling settings.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace duet::backend::cpu {

// One token id with its probability in the final sampling distribution.
struct Candidate {
  int32_t id = 0;
  double probability = 0;  // normalized over the surviving candidates
};

// Steps 1-2c on a copy of the logits. `counts`: the words of spec.counts_slot (null: nothing counted, as for
// counts_slot -1); the penalties read them only when one is on.
std::vector<float> penalized_logits(std::span<const float> logits, const SampleSpec& spec,
                                    const PenaltyCounts* counts = nullptr);

// Steps 1-4: the candidates a draw picks from, in draw order, probabilities summing to 1. Greedy
// (temperature 0) gives the argmax alone with probability 1.
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SampleSpec& spec,
                                           const PenaltyCounts* counts = nullptr);

// Step 5 on top of sampling_candidates, plus logprobs when spec.top_logprobs >= 0.
SampledRow sample_row(std::span<const float> logits, const SampleSpec& spec, const PenaltyCounts* counts = nullptr);

// log_softmax(logits)[id] and the n most likely (id, logprob) (ties to the lowest id).
float raw_logprob(std::span<const float> logits, int32_t id);
std::vector<std::pair<int32_t, float>> raw_top_logprobs(std::span<const float> logits, int32_t n);

}  // namespace duet::backend::cpu
