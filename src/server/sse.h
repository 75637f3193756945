#pragma once
// Server-sent events framing for OpenAI streams: one `data: <json>` event per chunk, `data: [DONE]` last.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace duet::server {

std::string sse_event(const nlohmann::json& data);
std::string sse_done();
// An event with a name (`event: NAME` then its data), as the Responses API streams them.
std::string sse_named_event(std::string_view name, const nlohmann::json& data);
// A comment line: clients ignore it; writing it tells us whether the client is still there.
std::string sse_keepalive();

}  // namespace duet::server
