#include "engine/draft_policy.h"

#include <algorithm>
#include <bit>

#include "base/error.h"

namespace duet::engine {

namespace {
constexpr double kTimeWeight = 0.1;     // of a new step's time in its average (about the last ten steps)
constexpr double kAcceptDecay = 0.995;  // per verified piece: acceptance follows the last few hundred drafts
}  // namespace

DraftPolicy::DraftPolicy(int32_t most) : most_(most) {
  if (most < 1 || most > kMostTokens) fail("draft policy: at most {} tokens, got {}", kMostTokens, most);
}

int32_t DraftPolicy::bucket_of(int32_t sequences) {
  const auto n = static_cast<uint32_t>(std::max(sequences, 1));
  return std::min(static_cast<int32_t>(std::bit_width(n - 1)), kBatchBuckets - 1);  // 1 -> 0, 2 -> 1, 3-4 -> 2...
}

double DraftPolicy::acceptance(int32_t k) const {
  const auto i = static_cast<size_t>(k);
  return compared_[i] > 0 ? accepted_[i] / compared_[i] : 1.0;
}

double DraftPolicy::expected_tokens(int32_t k) const {
  double tokens = 1, run = 1;
  for (int32_t j = 1; j <= k; ++j) tokens += run *= acceptance(j);
  return tokens;
}

double DraftPolicy::step_seconds(int32_t sequences, int32_t k) const {
  const auto b = static_cast<size_t>(bucket_of(sequences)), i = static_cast<size_t>(k);
  if (forward_[b][i].steps == 0 || (k > 0 && drafting_[b][i].steps == 0)) return 0;
  return forward_[b][i].seconds + (k > 0 ? drafting_[b][i].seconds : 0);
}

int32_t DraftPolicy::choose(int32_t sequences) {
  ++steps_;
  const auto& forward = forward_[static_cast<size_t>(bucket_of(sequences))];
  // Every K once before choosing, then now and then the one measured longest ago.
  int32_t stalest = 0;
  for (int32_t k = 0; k <= most_; ++k) {
    if (step_seconds(sequences, k) == 0) return k;
    if (forward[static_cast<size_t>(k)].last_step < forward[static_cast<size_t>(stalest)].last_step) stalest = k;
  }
  if (steps_ % kExploreEvery == 0) return stalest;
  int32_t best = 0;
  double best_rate = 0;
  for (int32_t k = 0; k <= most_; ++k) {
    const double rate = expected_tokens(k) / step_seconds(sequences, k);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

void DraftPolicy::note(Measured& m, double seconds, int64_t step) {
  m.seconds = m.steps == 0 ? seconds : m.seconds + kTimeWeight * (seconds - m.seconds);
  ++m.steps;
  m.last_step = step;
}

void DraftPolicy::note_forward(int32_t sequences, int32_t verified, double seconds) {
  if (verified < 0 || verified > most_ || seconds <= 0) return;
  note(forward_[static_cast<size_t>(bucket_of(sequences))][static_cast<size_t>(verified)], seconds, steps_);
}

void DraftPolicy::note_drafting(int32_t sequences, int32_t drafted, double seconds) {
  if (drafted < 1 || drafted > most_ || seconds < 0) return;
  note(drafting_[static_cast<size_t>(bucket_of(sequences))][static_cast<size_t>(drafted)], std::max(seconds, 1e-9),
       steps_);
}

void DraftPolicy::note_verified(int32_t compared, int32_t accepted) {
  for (int32_t k = 1; k <= compared && k <= most_; ++k) {
    const auto i = static_cast<size_t>(k);
    compared_[i] = compared_[i] * kAcceptDecay + 1;
    accepted_[i] = accepted_[i] * kAcceptDecay + (k <= accepted ? 1 : 0);
  }
}

}  // namespace duet::engine
