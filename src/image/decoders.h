#pragma once
// One decoder per format (png_decoder.cc, jpeg_decoder.cc, webp_decoder.cc, gif_decoder.cc). Called by decode(),
// which has checked the signature and the byte count.
#include <cstdint>
#include <span>

#include "image/image.h"
#include "image/limits.h"

namespace duet::image {

Image decode_png(std::span<const uint8_t> bytes, const Limits& limits);
Image decode_jpeg(std::span<const uint8_t> bytes, const Limits& limits);
Image decode_webp(std::span<const uint8_t> bytes, const Limits& limits);
Image decode_gif(std::span<const uint8_t> bytes, const Limits& limits);

}  // namespace duet::image
