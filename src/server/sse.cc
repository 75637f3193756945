#include "server/sse.h"

#include "server/errors.h"

namespace duet::server {

// json_text never emits a raw newline (they are escaped inside strings), so one data line is one event.
std::string sse_event(const nlohmann::json& data) { return "data: " + json_text(data) + "\n\n"; }

std::string sse_named_event(std::string_view name, const nlohmann::json& data) {
  return "event: " + std::string(name) + "\n" + sse_event(data);
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_keepalive() { return ": keep-alive\n\n"; }

}  // namespace duet::server
