#include "image/alpha.h"

namespace duet::image {

uint8_t over_white(uint8_t c, uint8_t a) {
  // Pillow's AlphaComposite.c with an opaque destination: out = src*a + 255*(255-a), over 255, in fixed point with 7
  // fractional bits and division by 255 done as ((x >> 8) + x) >> 8 after adding a half.
  if (a == 0) return 255;
  constexpr uint32_t kBits = 7;
  const uint32_t outa255 = uint32_t{a} * 255 + 255 * (255 - uint32_t{a});  // 255 * 255
  const uint32_t coef1 = uint32_t{a} * 255 * 255 * (1u << kBits) / outa255;
  const uint32_t coef2 = 255 * (1u << kBits) - coef1;
  const uint32_t tmp = uint32_t{c} * coef1 + 255 * coef2 + (0x80u << kBits);
  return static_cast<uint8_t>((((tmp >> 8) + tmp) >> 8) >> kBits);
}

std::vector<uint8_t> rgba_over_white(std::span<const uint8_t> rgba) {
  std::vector<uint8_t> rgb(rgba.size() / 4 * 3);
  for (size_t i = 0, o = 0; i + 3 < rgba.size(); i += 4, o += 3) {
    const uint8_t a = rgba[i + 3];
    rgb[o] = over_white(rgba[i], a);
    rgb[o + 1] = over_white(rgba[i + 1], a);
    rgb[o + 2] = over_white(rgba[i + 2], a);
  }
  return rgb;
}

}  // namespace duet::image
