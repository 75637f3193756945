#pragma once
// What an image may cost before it is decoded: encoded bytes, and the pixels its header declares (checked from the
// header, before any pixel is decompressed, so that a small file declaring a huge image is refused cheaply).
#include <cstddef>
#include <cstdint>

#include "image/image.h"

namespace duet::image {

struct Limits {
  size_t max_bytes = size_t{20} << 20;      // encoded size
  uint64_t max_pixels = uint64_t{1} << 25;  // width * height (33.5 M: 8K x 4K), also bounds the decode's memory
  uint32_t max_side = 16384;                // either side, in pixels
};

// Throws ImageError naming the format and the declared size when the header's size breaks a limit, or is zero.
void check_size(Format format, uint64_t width, uint64_t height, const Limits& limits);

}  // namespace duet::image
