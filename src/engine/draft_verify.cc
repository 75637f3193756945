#include "engine/draft_verify.h"

namespace duet::engine {

std::vector<backend::SampleSpec> verify_specs(const Sequence& sequence) {
  const std::span<const int32_t> rows = sequence.verify_tokens();
  std::vector<backend::SampleSpec> specs;
  specs.reserve(rows.size());
  // Row t's extras are drafts 0..t-1 (rows 1..t): its slot's counts hold the tokens accepted before the step.
  for (size_t t = 0; t < rows.size(); ++t)
    specs.push_back(sample_spec(sequence.sampling(), *sequence.slot(),
                                sequence.next_position() + static_cast<int64_t>(t), {}, rows.subspan(1, t)));
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
