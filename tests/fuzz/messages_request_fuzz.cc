// A libFuzzer target (fuzz_targets.h): a body as POST /v1/messages and /v1/messages/count_tokens read it. The first
// byte picks the server's default thinking (bit 0) and the route (bit 1: count_tokens, whose body has no max_tokens);
// the rest is the body, parsed by parse_json_body. Then as the route: parse_messages_request (text, image, tool_result,
// thinking and tool_use blocks), the chat template over the conversation (chat_prompt.h), and each image part's data
// URL as the decoder reads it (image/data_url.h). Refusals must be 4xx (client_error.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat_prompt.h"
#include "client_error.h"
#include "fuzz_server_options.h"
#include "fuzz_targets.h"
#include "image/data_url.h"
#include "image/image.h"
#include "server/errors.h"
#include "server/messages_request.h"

int duet::fuzz::messages_request(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const duet::server::ServerOptions options = duet::fuzz::fuzz_server_options(data[0] & 1);
  try {
    const duet::server::MessagesRequest request =
        duet::server::parse_messages_request(duet::server::parse_json_body(text), options, data[0] & 2);
    duet::fuzz::render_prompt(request.messages, request.tools, request.enable_thinking);
    for (const duet::server::ImagePart& part : request.images) {
      if (part.param.empty()) __builtin_trap();
      try {
        (void)duet::image::parse_data_url(part.url, 1 << 20);
      } catch (const duet::image::ImageError&) {
      }
    }
  } catch (const duet::server::ApiError& error) {
    duet::fuzz::require_client_error(error.status());
  }
  return 0;
}
