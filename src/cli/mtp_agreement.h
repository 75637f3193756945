#pragma once
// `duet run --mtp-agreement`: how often the checkpoint's MTP layer would draft the token greedy decoding then chose,
// the acceptance proxy of speculative decoding with K = 1 (issue 20).
#include <cstdint>
#include <span>

#include "model/model.h"

namespace duet::cli {

struct MtpAgreement {
  int64_t agreed = 0;
  int64_t rows = 0;
};

// Over `sequence` (a prompt and its greedy continuation, which starts at `first_generated`): the main model's
// final-norm rows come from one prefill of the whole sequence; MTP row j (row j with token j + 1) is counted for
// every j from first_generated - 1 on whose token j + 2 exists, as a drafting step at j would be, and agrees when
// its argmax is token j + 2. Refuses a model without an MTP layer.
MtpAgreement mtp_agreement(model::Model& model, std::span<const int32_t> sequence, size_t first_generated);

}  // namespace duet::cli
