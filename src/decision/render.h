#pragma once
// The spec's render(v): a string as is; anything else as Python's
// json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":")): raw UTF-8, keys by code point, Python's
// float repr (1.0, 1e-05, 1e+16), integers exact however long.
#include <string>

#include "decision/request.h"

namespace duet::decision {

std::string render(const Json& value);

// An option's text: render({"option_id": id, "description": d}), without "description" when there is none.
std::string render_option(const Option& option);

}  // namespace duet::decision
