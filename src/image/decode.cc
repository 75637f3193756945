#include "image/decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "image/decoders.h"
#include "image/exif_orientation.h"
#include "image/format.h"

namespace duet::image {

namespace {

Image decode_pixels(Format format, std::span<const uint8_t> bytes, const Limits& limits) {
  switch (format) {
    case Format::kPng:
      return decode_png(bytes, limits);
    case Format::kJpeg:
      return decode_jpeg(bytes, limits);
    case Format::kWebp:
      return decode_webp(bytes, limits);
    case Format::kGif:
      return decode_gif(bytes, limits);
  }
  throw ImageError("image: unknown format");
}

}  // namespace

Image decode(std::span<const uint8_t> bytes, const Limits& limits) {
  if (bytes.empty()) throw ImageError("image: no bytes");
  if (bytes.size() > limits.max_bytes)
    throw ImageError(fmt::format("image: {} bytes, over the limit of {}", bytes.size(), limits.max_bytes));
  const auto format = sniff(bytes);
  if (!format) {
    std::string start;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) start += fmt::format("{:02x}", bytes[i]);
    throw ImageError(fmt::format("image: not a PNG, JPEG, WebP or GIF file (its first bytes are {})", start));
  }
  // Turned as its EXIF (or XMP) orientation asks, as viewers show it (exif_orientation.h); the tag is read after the
  // pixels decode, so a file the decoder refuses is refused the same with or without it.
  return apply_exif_orientation(decode_pixels(*format, bytes, limits), image_orientation(*format, bytes));
}

}  // namespace duet::image
