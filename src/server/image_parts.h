#pragma once
// Image content parts, as each chat-like route spells them, read into one shape where the message is parsed, rendered
// as the Qwen3.5 chat template renders an image, and decoded later (server/prompt_images.h) once the server knows it
// can read images:
//   chat/completions  {"type": "image_url", "image_url": {"url": "data:image/png;base64,...", "detail": "auto"}}
//   responses         {"type": "input_image", "image_url": "data:image/png;base64,...", "detail": "auto"}
//   messages          {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "..."}}
// Every route refuses the same things with the same words (400 naming the field): a missing image, a scheme other than
// data: and http(s), an image in a system message. A remote http(s) URL is read here as it is; prompt_images.h fetches
// it on a server started with --allow-image-urls and refuses it, naming the field, on any other.
#include <optional>
#include <string>
#include <string_view>

#include "server/ignored_fields.h"
#include "server/request_parsing.h"

namespace duet::server {

// What the published template's render_content writes for an image part (docs/vision.md 4), `Picture N: ` being off
// by default (add_vision_id); the processor then repeats <|image_pad|> once per image token.
inline constexpr std::string_view kImageMarkup = "<|vision_start|><|image_pad|><|vision_end|>";

struct ImagePart {
  std::string param;            // where the request has it, for refusals: "messages[1].content[0]"
  std::string url;              // a data: URL, or a remote http(s) one
  std::string url_param;        // the field that holds the URL: "messages[1].content[0].image_url.url"
  std::string_view how_inline;  // how this API sends the bytes instead of a remote URL (static text)

  bool remote() const;
};

// The template refuses images in a system message (`role` system or developer), and so does every route: 400 naming
// `param`.
void refuse_image_in_system(const std::string& role, const std::string& param);

// chat/completions: one `image_url` part named `param`. `image_url` is an object with `url` (or the URL as a string,
// which some clients send); `detail` is accepted and ignored (the processor's own pixel range decides the size).
ImagePart parse_image_part(const Json& part, const std::string& param, IgnoredFields& unknown);

// responses: one `input_image` part named `param`, its `image_url` a data: URL (`detail` accepted and ignored, as on
// chat). `file_id` is refused by name (duet keeps no files).
ImagePart parse_input_image(const Json& part, const std::string& param, IgnoredFields& unknown);

// messages: one `image` block named `param`, its base64 `source` made into the data: URL chat would carry (the bytes'
// own signature decides the decoder, whatever `media_type` says, as for chat's data URLs). A `url` source is checked
// as chat checks its URLs (a remote one is refused); `file` and other sources are refused by name.
ImagePart parse_image_block(const Json& block, const std::string& param, IgnoredFields& unknown);

}  // namespace duet::server
