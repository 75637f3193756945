#pragma once
// Picks the next token from a row of logits. A pure function of (logits, sampling params, the sequence's
// tokens, the position): no state shared between requests, so a request samples the same token whatever else
// is in the step.
//
// Order of transforms (the same for every request):
//   1. repetition penalty, Hugging Face style, over every id in prompt + generated: a positive logit is
//      divided by the penalty, a negative one multiplied;
//   2. presence and frequency penalties, OpenAI style, over generated ids only:
//      logit -= frequency * count + presence * (count > 0);
//   2b. logit_bias: logit += bias for each id it names;
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
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request.h"

namespace duet::engine {

// What the penalties look at: ids seen in prompt + generated, and how often each was generated.
class TokenCounts {
 public:
  void add_prompt(std::span<const int32_t> ids);
  void add_generated(int32_t id);
  const std::unordered_set<int32_t>& seen() const { return seen_; }
  const std::unordered_map<int32_t, int32_t>& generated() const { return generated_; }

 private:
  std::unordered_set<int32_t> seen_;
  std::unordered_map<int32_t, int32_t> generated_;
};

struct SampledToken {
  int32_t id = 0;
  std::optional<float> logprob;            // when params.top_logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, most likely first
};

// One token id with its probability in the final sampling distribution.
struct Candidate {
  int32_t id = 0;
  double probability = 0;  // normalized over the surviving candidates
};

// A token mask: bit (id % 32) of word (id / 32) set where the id is allowed (grammar/token_mask.h). Empty: none.
using AllowedTokens = std::span<const uint32_t>;

// Steps 1-2c on a copy of the logits.
std::vector<float> penalized_logits(std::span<const float> logits, const SamplingParams& params,
                                    const TokenCounts& counts, AllowedTokens allowed = {});

// Steps 1-4: the candidates a draw picks from, in draw order, probabilities summing to 1. Greedy
// (temperature 0) gives the argmax alone with probability 1.
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& params,
                                           const TokenCounts& counts, AllowedTokens allowed = {});

// Step 5 on top of sampling_candidates, plus logprobs when asked.
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, const TokenCounts& counts,
                          int64_t position, AllowedTokens allowed = {});

// log_softmax(logits)[id] and the n most likely ids (ties to the lowest id).
float raw_logprob(std::span<const float> logits, int32_t id);
std::vector<TokenLogprob> raw_top_logprobs(std::span<const float> logits, int32_t n);

}  // namespace duet::engine
