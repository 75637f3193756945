#pragma once
// RGBA over an opaque white background, as transformers' convert_to_rgb does it (Pillow's Image.alpha_composite,
// the same integer arithmetic, so that the result is Pillow's to the bit).
#include <cstdint>
#include <span>
#include <vector>

namespace duet::image {

// One pixel: the composited value of colour channel c with alpha a.
uint8_t over_white(uint8_t c, uint8_t a);

// rgba: (pixels, 4) -> (pixels, 3).
std::vector<uint8_t> rgba_over_white(std::span<const uint8_t> rgba);

}  // namespace duet::image
