#pragma once
// A checkpoint's preprocessor_config.json (docs/vision.md 2), what the Qwen2-VL image processor reads: the pixel
// range smart_resize keeps an image in, and the patch layout with its normalisation. Every switch duet implements only
// one way (resize, rescale, normalise, RGB conversion, bicubic resampling) is refused by name when set otherwise.
#include <cstdint>
#include <string>

#include "image/patches.h"

namespace duet::image {

struct ProcessorConfig {
  uint64_t min_pixels = 56 * 56;         // size.shortest_edge (or min_pixels): a pixel count, not an edge
  uint64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge (or max_pixels)
  PatchLayout layout;

  uint32_t factor() const { return layout.patch * layout.merge; }  // both sides are multiples of it

  // Parses the file's text; `source` names it in messages. Throws ImageError naming the key.
  static ProcessorConfig parse(const std::string& json_text, const std::string& source);
  static ProcessorConfig load(const std::string& path);
};

}  // namespace duet::image
