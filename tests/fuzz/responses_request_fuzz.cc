// A libFuzzer target (fuzz_targets.h): a body as POST /v1/responses reads it. The first byte picks the server's default
// thinking (bit 0) and the caller's key (bit 1: the stored response's owner or another key, who must not find it); the
// rest is the body, parsed by parse_json_body. Then as the route: stored state resolved (previous_response_id,
// item_reference) against a store holding one response, parse_responses_request, and the chat template over the
// conversation (chat_prompt.h). Refusals must be 4xx (client_error.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat_prompt.h"
#include "client_error.h"
#include "fuzz_server_options.h"
#include "fuzz_targets.h"
#include "server/errors.h"
#include "server/responses_request.h"
#include "server/responses_state.h"

namespace {

using duet::server::Json;

// resp_seed (owner "owner"): a user message in, a message and a function call out; its ids are in the seeds.
duet::server::ResponseStore& store() {
  static duet::server::ResponseStore* store = [] {
    auto* made = new duet::server::ResponseStore;
    made->put("owner", {Json::parse(R"({"id": "resp_seed", "object": "response", "output": [
        {"type": "message", "id": "msg_out", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]},
        {"type": "function_call", "id": "fc_out", "call_id": "call_1", "name": "f", "arguments": "{\"a\": 1}"}]})"),
                        Json::parse(R"([{"type": "message", "id": "msg_in", "role": "user",
        "content": [{"type": "input_text", "text": "Hello"}]}])")});
    return made;
  }();
  return *store;
}

}  // namespace

int duet::fuzz::responses_request(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const duet::server::ServerOptions options = duet::fuzz::fuzz_server_options(data[0] & 1);
  try {
    duet::server::ResponsesState state;
    const Json body = duet::server::resolve_responses_state(duet::server::parse_json_body(text), store(),
                                                            data[0] & 2 ? "other" : "owner", state);
    const duet::server::ResponsesRequest request = duet::server::parse_responses_request(body, options);
    duet::fuzz::render_prompt(request.messages, request.tools, request.enable_thinking);
  } catch (const duet::server::ApiError& error) {
    duet::fuzz::require_client_error(error.status());
  }
  return 0;
}
