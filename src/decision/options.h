#pragma once
// The order a question's options take in the prompt, and the client's order the answer reports them in.
#include <vector>

#include "decision/request.h"

namespace duet::decision {

inline constexpr const char* kNoulTrueDefault = "The proposition is true or the answer is yes.";
inline constexpr const char* kNoulFalseDefault = "The proposition is false or the answer is no.";

struct OrderedOptions {
  std::vector<Option> encoded;        // prompt order
  std::vector<size_t> request_order;  // encoded[request_order[k]] is the client's k-th option
};

// `criteria` must already be valid for `type` (validation.cc): noul null or {"true"?, "false"?} of strings or
// nulls; choice a non-empty object of strings or nulls; score a non-empty list of strings.
// noul: true, false, with the default descriptions unless criteria give theirs. choice: option ids sorted by code
// point. score: "0", "1", ... in list order.
OrderedOptions order_options(QuestionType type, const Json& criteria);

}  // namespace duet::decision
