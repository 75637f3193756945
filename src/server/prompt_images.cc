#include "server/prompt_images.h"

#include <fmt/format.h>

#include <algorithm>

#include "image/data_url.h"
#include "image/decode.h"
#include "image/patches.h"
#include "image/resize.h"
#include "image/smart_resize.h"
#include "server/errors.h"
#include "server/image_fetch.h"

namespace duet::server {

namespace {

// One part's image as the processor leaves it (docs/vision.md 2): RGB, resized to smart_resize's size, in patches.
// `room` is how many image tokens the context leaves it: a larger image is refused before it is resized.
engine::PromptImage preprocess(const VisionSupport& vision, const ImagePart& part, int64_t room) {
  std::vector<uint8_t> bytes;
  if (part.remote()) {
    try {
      bytes = vision.fetcher->fetch(part.url);
    } catch (const ImageFetchError& error) {
      throw ApiError(400, fmt::format("{}: {}", part.param, error.what()), part.param, "invalid_image_url");
    }
  }
  try {
    if (!part.remote()) bytes = image::parse_data_url(part.url, vision.limits.max_bytes).bytes;
    const image::Image decoded = image::decode(bytes, vision.limits);
    const image::ProcessorConfig& p = vision.processor;
    const image::Size size = image::smart_resize(decoded.height, decoded.width, p.factor(), p.min_pixels, p.max_pixels);
    const int64_t tokens = int64_t{size.height} * size.width / (int64_t{p.factor()} * p.factor());
    if (tokens > room)
      throw ApiError(
          400,
          fmt::format("{}: the {} x {} image is {} tokens at {} x {}; the context leaves {} for it", part.param,
                      decoded.width, decoded.height, tokens, size.width, size.height, std::max<int64_t>(room, 0)),
          part.param, "context_length_exceeded");
    image::Patches patches = image::to_patches(image::resize_bicubic(decoded, size.width, size.height), p.layout);
    return {.pixel_values = std::move(patches.values),
            .t = static_cast<int32_t>(patches.grid_t),
            .h = static_cast<int32_t>(patches.grid_h),
            .w = static_cast<int32_t>(patches.grid_w)};
  } catch (const image::ImageError& error) {
    const std::string from = part.remote() ? fmt::format(" (the body of {})", part.url.substr(0, 200)) : "";
    throw ApiError(400, fmt::format("{}: {}{}", part.param, error.what(), from), part.param, "invalid_image");
  }
}

}  // namespace

std::shared_ptr<const std::vector<engine::PromptImage>> expand_prompt_images(const VisionSupport& vision,
                                                                             const std::vector<ImagePart>& parts,
                                                                             std::vector<int32_t>& prompt,
                                                                             const std::string& param,
                                                                             int32_t context) {
  const auto markers = std::count(prompt.begin(), prompt.end(), vision.image_token_id);
  if (static_cast<size_t>(markers) != parts.size())
    throw ApiError(400,
                   fmt::format("the rendered prompt holds {} image tokens (<|image_pad|>, id {}) for {} image parts: "
                               "a text part may not write the image markup itself",
                               markers, vision.image_token_id, parts.size()),
                   param, "invalid_messages");
  if (parts.empty()) return nullptr;
  for (const ImagePart& part : parts)
    if (part.remote() && !vision.fetcher)
      refuse_field(part.url_param, fmt::format("remote image URLs are not fetched; send the image inline {} (or start "
                                               "the server with --allow-image-urls)",
                                               part.how_inline));
  auto images = std::make_shared<std::vector<engine::PromptImage>>();
  const uint32_t merge = vision.processor.layout.merge;
  int64_t room = int64_t{context} - static_cast<int64_t>(prompt.size() - parts.size());
  for (const ImagePart& part : parts) {
    images->push_back(preprocess(vision, part, room));
    room -= int64_t{images->back().t} * images->back().h * images->back().w / (merge * merge);
  }
  std::vector<int32_t> expanded;
  size_t next = 0;
  for (int32_t id : prompt) {
    if (id != vision.image_token_id) {
      expanded.push_back(id);
      continue;
    }
    engine::PromptImage& image = (*images)[next++];
    const auto tokens = static_cast<size_t>(image.t) * image.h * image.w / (merge * merge);
    image.first_token = static_cast<int32_t>(expanded.size());
    expanded.insert(expanded.end(), tokens, id);
  }
  prompt = std::move(expanded);
  return images;
}

}  // namespace duet::server
