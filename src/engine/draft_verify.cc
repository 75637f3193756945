#include "engine/draft_verify.h"

namespace duet::engine {

std::vector<backend::SampleSpec> verify_specs(const Sequence& sequence) {
  const std::span<const int32_t> rows = sequence.verify_tokens();
  std::vector<backend::SampleSpec> specs;
  specs.reserve(rows.size());
  const SamplingParams& params = sequence.sampling();
  const bool penalized = engine::penalized(params);
  // Only the penalties read the counts: the copy is made for penalized requests alone.
  std::optional<TokenCounts> counts;
  if (penalized) counts = sequence.counts();
  const TokenCounts& now = penalized ? *counts : sequence.counts();
  for (size_t t = 0; t < rows.size(); ++t) {
    if (t > 0 && penalized) counts->add_generated(rows[t]);  // draft t - 1, as if accepted
    specs.push_back(sample_spec(params, now, sequence.next_position() + static_cast<int64_t>(t)));
  }
  return specs;
}

Verified take_verified(Sequence& sequence, std::span<const int32_t> drafts, std::span<const SampledToken> draws,
                       const std::function<bool(int32_t)>& is_stop_token, bool unchecked) {
  Verified v;
  for (size_t t = 0; t < draws.size(); ++t) {
    const SampledToken& token = draws[t];
    ++v.kept;
    v.reason = sequence.accept(token, is_stop_token(token.id));
    if (v.reason || t == drafts.size()) break;
    ++v.compared;
    if (token.id != drafts[t] && !unchecked) break;
    ++v.accepted;
  }
  return v;
}

}  // namespace duet::engine
