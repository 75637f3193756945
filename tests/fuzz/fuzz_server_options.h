#pragma once
// The server options the request-parser fuzz targets read bodies under: the demo's served name, and the server's
// default thinking as the input's first byte picks it.
#include "server/server_context.h"

namespace duet::fuzz {

inline duet::server::ServerOptions fuzz_server_options(bool thinking_by_default) {
  duet::server::ServerOptions options;
  options.served_model_name = "demo";
  options.enable_thinking = thinking_by_default;
  return options;
}

}  // namespace duet::fuzz
