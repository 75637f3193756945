#include "image/format.h"

#include <cstring>

namespace duet::image {

const char* format_name(Format format) {
  switch (format) {
    case Format::kPng:
      return "PNG";
    case Format::kJpeg:
      return "JPEG";
    case Format::kWebp:
      return "WebP";
    case Format::kGif:
      return "GIF";
  }
  return "?";
}

namespace {
bool starts_with(std::span<const uint8_t> bytes, size_t at, const char* magic, size_t n) {
  return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
}
}  // namespace

std::optional<Format> sniff(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, 0, "\x89PNG\r\n\x1a\n", 8)) return Format::kPng;
  if (starts_with(bytes, 0, "\xff\xd8\xff", 3)) return Format::kJpeg;
  if (starts_with(bytes, 0, "RIFF", 4) && starts_with(bytes, 8, "WEBP", 4)) return Format::kWebp;
  if (starts_with(bytes, 0, "GIF87a", 6) || starts_with(bytes, 0, "GIF89a", 6)) return Format::kGif;
  return std::nullopt;
}

}  // namespace duet::image
