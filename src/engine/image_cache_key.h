#pragma once
// How the prompt cache tells a prompt's images apart (issue 21). Every image of one grid gives the same token ids
// (its <|image_pad|> run), so token ids alone would hand one image's cached state to another; an image's key adds a
// digest of what the vision tower reads of it (its grid and pixel values), which decides its rows and so every state
// computed after its first token.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"

namespace duet::engine {

struct ImageCacheKey {
  int32_t first_token = 0;  // the prompt index of its first image token
  std::string digest;       // sha256 of its grid and pixel values
  bool operator==(const ImageCacheKey&) const = default;
};

// One key per image, in prompt order (the order of Request::images).
std::vector<ImageCacheKey> image_cache_keys(const std::vector<PromptImage>& images);

// The images whose first token lies before `length`: what a cached prefix of that many tokens was computed from.
std::span<const ImageCacheKey> images_before(std::span<const ImageCacheKey> images, int64_t length);

}  // namespace duet::engine
