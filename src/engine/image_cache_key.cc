#include "engine/image_cache_key.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/sha256.h"

namespace duet::engine {

std::vector<ImageCacheKey> image_cache_keys(const std::vector<PromptImage>& images) {
  std::vector<ImageCacheKey> keys;
  for (const PromptImage& image : images) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(image.pixel_values.data());
    const std::string pixels = sha256_hex(std::span(bytes, image.pixel_values.size() * sizeof(float)));
    // The grid too: the same values cut into another grid are another image to the tower.
    keys.push_back({image.first_token, fmt::format("{}x{}x{} {}", image.t, image.h, image.w, pixels)});
  }
  return keys;
}

std::span<const ImageCacheKey> images_before(std::span<const ImageCacheKey> images, int64_t length) {
  const auto end = std::find_if(images.begin(), images.end(),
                                [length](const ImageCacheKey& key) { return key.first_token >= length; });
  return images.first(static_cast<size_t>(end - images.begin()));
}

}  // namespace duet::engine
