// A libFuzzer target (fuzz_targets.h): a body as POST /v1/systemone reads it. The first byte picks the limits (bit 0:
// hosted or reference) and the token budget (the other bits: 64 to 8,192 tokens, so prompts over it, truncated or
// refused, are reached); the rest is the body. As the route: parse_decision_body, validate_decision_request, then the
// prompt encoded (decision::encode_decision, one id per byte). Refusals must be DecisionErrors of 4xx (client_error.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "byte_tokenizer.h"
#include "client_error.h"
#include "decision/encoder.h"
#include "decision/errors.h"
#include "decision/request.h"
#include "fuzz_targets.h"

int duet::fuzz::systemone_request(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const duet::fuzz::ByteTokenizer tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto limits = data[0] & 1 ? duet::decision::DecisionLimits::reference : duet::decision::DecisionLimits::hosted;
  const int32_t max_length = 64 * (1 + (data[0] >> 1));
  try {
    const duet::decision::DecisionRequest request =
        duet::decision::validate_decision_request(duet::decision::parse_decision_body(text), limits);
    (void)duet::decision::encode_decision(tokenizer, request, max_length);
  } catch (const duet::decision::DecisionError& error) {
    duet::fuzz::require_client_error(error.status());
  }
  return 0;
}
