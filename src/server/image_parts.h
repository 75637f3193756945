#pragma once
// Image content parts of chat messages (`{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`):
// read where the message is parsed, rendered as the Qwen3.5 chat template renders an image, and decoded later
// (server/prompt_images.h) once the server knows it can read images.
#include <string>
#include <string_view>

#include "server/ignored_fields.h"
#include "server/request_parsing.h"

namespace duet::server {

// What the published template's render_content writes for an image part (docs/vision.md 4), `Picture N: ` being off
// by default (add_vision_id); the processor then repeats <|image_pad|> once per image token.
inline constexpr std::string_view kImageMarkup = "<|vision_start|><|image_pad|><|vision_end|>";

struct ImagePart {
  std::string param;  // where the request has it, for refusals: "messages[1].content[0]"
  std::string url;    // a data: URL
};

// Reads one `image_url` part named `param`. `image_url` is an object with `url` (or the URL as a string, which some
// clients send); `detail` is accepted and ignored (the processor's own pixel range decides the size). Refused (400,
// naming the part): a missing URL, a remote http(s) URL (the server fetches nothing: send the bytes as a data: URL),
// any other scheme.
ImagePart parse_image_part(const Json& part, const std::string& param, IgnoredFields& unknown);

}  // namespace duet::server
