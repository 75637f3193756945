#pragma once
// What the request-parser fuzz targets hold every refusal to: a 4xx, the client's fault and named as such. A 5xx, or
// any other exception escaping a parser (a nlohmann type_error from reading a field of the wrong type), would reach
// the client as a 500 internal_error: a finding, so the run aborts on it.
#include <cstdlib>

namespace duet::fuzz {

inline void require_client_error(int status) {
  if (status < 400 || status > 499) std::abort();
}

}  // namespace duet::fuzz
