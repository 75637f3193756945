#pragma once
// Server-sent events framing for OpenAI streams: one `data: <json>` event per chunk, `data: [DONE]` last.
#include <nlohmann/json.hpp>
#include <string>

namespace duet::server {

std::string sse_event(const nlohmann::json& data);
std::string sse_done();
// A comment line: clients ignore it; writing it tells us whether the client is still there.
std::string sse_keepalive();

}  // namespace duet::server
