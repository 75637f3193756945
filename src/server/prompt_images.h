#pragma once
// A chat prompt's images, from the request's data: URLs (and http(s) URLs, with --allow-image-urls) to what the engine
// takes (docs/vision.md 2, 4): each image fetched when remote, decoded, resized and cut into patches as the
// checkpoint's processor does, and the prompt's i-th <|image_pad|> token repeated once per token of image i, as the
// processor's replace_image_token does before tokenizing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "image/limits.h"
#include "image/processor_config.h"
#include "server/image_parts.h"

namespace duet::server {

class ImageFetcher;

// What a server that reads images knows of them: set when the model's vision tower loaded (`duet serve`).
struct VisionSupport {
  image::ProcessorConfig processor;  // preprocessor_config.json
  image::Limits limits;              // what an image may cost before it is decoded
  int32_t image_token_id = -1;       // <|image_pad|>
  // Remote image URLs are fetched through it (--allow-image-urls); null: they are refused, naming the field.
  std::shared_ptr<const ImageFetcher> fetcher{};
};

// Expands `prompt` (the rendered template, tokenized: one image token per image part) in place and returns its images
// for engine::Request::images (null without images). Throws ApiError 400: `invalid_value` naming the URL's field of a
// remote URL on a server without a fetcher, before anything is fetched or decoded; `invalid_image_url` naming the part
// whose URL was not fetched (image_fetch.h says why not); `invalid_image` naming the part whose data URL or bytes are
// bad (not an image, truncated, too large, an aspect ratio over 200), `context_length_exceeded` naming
// the part whose tokens do not fit in `context` with the prompt's, before it is resized, `invalid_messages` naming
// `param` when the prompt's image tokens are not one per image part (a text that writes <|image_pad|> itself, say).
std::shared_ptr<const std::vector<engine::PromptImage>> expand_prompt_images(const VisionSupport& vision,
                                                                             const std::vector<ImagePart>& parts,
                                                                             std::vector<int32_t>& prompt,
                                                                             const std::string& param, int32_t context);

}  // namespace duet::server
