#include "image/limits.h"

#include <fmt/format.h>

namespace duet::image {

void check_size(Format format, uint64_t width, uint64_t height, const Limits& limits) {
  const char* name = format_name(format);
  if (width == 0 || height == 0) throw ImageError(fmt::format("{} image: its size is {} x {}", name, width, height));
  if (width > limits.max_side || height > limits.max_side)
    throw ImageError(
        fmt::format("{} image: {} x {} pixels, a side over the limit of {}", name, width, height, limits.max_side));
  if (width * height > limits.max_pixels)
    throw ImageError(fmt::format("{} image: {} x {} = {} pixels, over the limit of {}", name, width, height,
                                 width * height, limits.max_pixels));
}

}  // namespace duet::image
