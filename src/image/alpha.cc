#include "image/alpha.h"

namespace duet::image {

std::vector<uint8_t> drop_alpha(std::span<const uint8_t> rgba) {
  std::vector<uint8_t> rgb(rgba.size() / 4 * 3);
  for (size_t i = 0, o = 0; i + 3 < rgba.size(); i += 4, o += 3) {
    rgb[o] = rgba[i];
    rgb[o + 1] = rgba[i + 1];
    rgb[o + 2] = rgba[i + 2];
  }
  return rgb;
}

}  // namespace duet::image
