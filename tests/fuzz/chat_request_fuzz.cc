// A libFuzzer target (fuzz_targets.h): a body as POST /v1/chat/completions and /v1/completions read it. The first byte
// picks the route (bit 0: chat or completions) and the server's default thinking (bit 1); the rest is the body, parsed
// by parse_json_body as the routes do. Chat: parse_chat_request, then the chat template over what it read (the prompt
// the route renders, chat_prompt.h). Completions: parse_completion_request, a text prompt tokenized one id per byte.
// Refusals must be 4xx (client_error.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "byte_tokenizer.h"
#include "chat_prompt.h"
#include "client_error.h"
#include "fuzz_server_options.h"
#include "fuzz_targets.h"
#include "server/chat_request.h"
#include "server/completions_request.h"
#include "server/errors.h"

namespace {

void read_chat(const duet::server::Json& body, bool thinking_by_default) {
  const duet::server::ChatRequest request =
      duet::server::parse_chat_request(body, duet::fuzz::fuzz_server_options(thinking_by_default));
  duet::fuzz::render_prompt(request.messages, request.tools, request.enable_thinking);
}

void read_completion(const duet::server::Json& body) {
  static const duet::fuzz::ByteTokenizer tokenizer;
  (void)duet::server::parse_completion_request(body, "demo", tokenizer);
}

}  // namespace

int duet::fuzz::chat_request(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const duet::server::Json body = duet::server::parse_json_body(text);
    if (data[0] & 1)
      read_completion(body);
    else
      read_chat(body, data[0] & 2);
  } catch (const duet::server::ApiError& error) {
    duet::fuzz::require_client_error(error.status());
  }
  return 0;
}
