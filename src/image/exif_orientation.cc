#include "image/exif_orientation.h"

#include <array>
#include <cstring>
#include <utility>

namespace duet::image {
namespace {

// Reads inside a TIFF block in its own byte order; every read is bounds-checked, as the bytes are the client's.
struct TiffReader {
  std::span<const uint8_t> tiff;
  bool little = true;

  bool has(size_t at, size_t count) const { return at <= tiff.size() && count <= tiff.size() - at; }
  uint32_t u16(size_t at) const { return little ? tiff[at] | tiff[at + 1] << 8 : tiff[at] << 8 | tiff[at + 1]; }
  uint32_t u32(size_t at) const { return little ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2); }
};

constexpr uint32_t kOrientationTag = 0x0112;
constexpr uint32_t kTypeShort = 3, kTypeLong = 4;

// The Orientation in IFD0 of an EXIF block (after "Exif\0\0"): a TIFF header, then IFD0's 12-byte entries.
int tiff_orientation(std::span<const uint8_t> tiff) {
  TiffReader r{tiff};
  if (!r.has(0, 8)) return 1;
  if (tiff[0] == 'I' && tiff[1] == 'I')
    r.little = true;
  else if (tiff[0] == 'M' && tiff[1] == 'M')
    r.little = false;
  else
    return 1;
  if (r.u16(2) != 42) return 1;
  const size_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return 1;
  const uint32_t entries = r.u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t{12} * i;
    if (!r.has(entry, 12)) return 1;
    if (r.u16(entry) != kOrientationTag) continue;
    const uint32_t type = r.u16(entry + 2), count = r.u32(entry + 4);
    // One value, stored in the entry itself; several values are a tuple to Pillow, which it does not turn by.
    if (count != 1) return 1;
    const uint32_t value = type == kTypeShort ? r.u16(entry + 8) : type == kTypeLong ? r.u32(entry + 8) : 0;
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace

int jpeg_exif_orientation(std::span<const uint8_t> jpeg) {
  if (jpeg.size() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) return 1;
  size_t at = 2;
  // Marker segments up to the first scan: FF, the marker, then (for most) a big-endian length counting itself.
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xFF) return 1;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte before a marker
      ++at;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;              // the scan (or the end): EXIF comes before it
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      at += 2;
      continue;
    }
    const size_t length = size_t{jpeg[at + 2]} << 8 | jpeg[at + 3];
    if (length < 2 || length > jpeg.size() - at - 2) return 1;
    const std::span<const uint8_t> payload = jpeg.subspan(at + 4, length - 2);
    static constexpr std::array<uint8_t, 6> kExif{'E', 'x', 'i', 'f', 0, 0};
    // The first EXIF segment is the one read (Pillow keeps the first too).
    if (marker == 0xE1 && payload.size() >= kExif.size() && std::memcmp(payload.data(), kExif.data(), 6) == 0)
      return tiff_orientation(payload.subspan(kExif.size()));
    at += 2 + length;
  }
  return 1;
}

Image apply_exif_orientation(Image image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const size_t w = image.width, h = image.height;
  const bool swaps = orientation >= 5;
  const size_t out_w = swaps ? h : w, out_h = swaps ? w : h;
  std::vector<uint8_t> out(image.rgb.size());
  for (size_t y = 0; y < out_h; ++y)
    for (size_t x = 0; x < out_w; ++x) {
      // The stored pixel that shows at (x, y) once turned.
      size_t sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;
        case 3:
          sx = w - 1 - x, sy = h - 1 - y;
          break;
        case 4:
          sy = h - 1 - y;
          break;
        case 5:
          sx = y, sy = x;
          break;
        case 6:
          sx = y, sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y, sy = h - 1 - x;
          break;
        case 8:
          sx = w - 1 - y, sy = x;
          break;
      }
      std::memcpy(&out[(y * out_w + x) * 3], &image.rgb[(sy * w + sx) * 3], 3);
    }
  image.rgb = std::move(out);
  image.width = static_cast<uint32_t>(out_w);
  image.height = static_cast<uint32_t>(out_h);
  return image;
}

}  // namespace duet::image
