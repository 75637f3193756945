#include "image/exif_orientation.h"

#include <algorithm>
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

constexpr std::array<uint8_t, 6> kExifPrefix{'E', 'x', 'i', 'f', 0, 0};

bool starts_with(std::span<const uint8_t> bytes, std::span<const uint8_t> prefix) {
  return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

bool fourcc_is(std::span<const uint8_t> bytes, size_t at, const char (&code)[5]) {
  return std::memcmp(bytes.data() + at, code, 4) == 0;
}

uint32_t big32(std::span<const uint8_t> b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

uint32_t little32(std::span<const uint8_t> b, size_t at) {
  return uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 | uint32_t{b[at + 2]} << 16 | uint32_t{b[at + 3]} << 24;
}

// PNG's CRC-32 (ISO 3309, reflected polynomial 0xEDB88320), as the chunk's last four bytes hold it.
uint32_t crc32(std::span<const uint8_t> bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (const uint8_t b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

// A TIFF header, then IFD0's 12-byte entries.
int exif_tiff_orientation(std::span<const uint8_t> tiff) {
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
    // The first EXIF segment is the one read (Pillow keeps the first too).
    if (marker == 0xE1 && starts_with(payload, kExifPrefix))
      return exif_tiff_orientation(payload.subspan(kExifPrefix.size()));
    at += 2 + length;
  }
  return 1;
}

int png_exif_orientation(std::span<const uint8_t> png) {
  static constexpr std::array<uint8_t, 8> kSignature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (!starts_with(png, kSignature)) return 1;
  // Chunks: a big-endian length (at most 2^31 - 1), the type, the data, a CRC over type and data.
  for (size_t at = kSignature.size(); png.size() - at >= 12;) {
    const uint32_t length = big32(png, at);
    if (length > 0x7FFFFFFFu || length > png.size() - at - 12) return 1;
    if (fourcc_is(png, at + 4, "IEND")) return 1;
    if (fourcc_is(png, at + 4, "eXIf")) {
      const std::span<const uint8_t> typed = png.subspan(at + 4, size_t{4} + length);
      if (crc32(typed) != big32(png, at + 8 + length)) return 1;
      return exif_tiff_orientation(typed.subspan(4));
    }
    at += size_t{12} + length;
  }
  return 1;
}

int webp_exif_orientation(std::span<const uint8_t> webp) {
  // "RIFF", the RIFF size (little-endian, counting from byte 8), "WEBP", then chunks: a FourCC, a little-endian size,
  // the payload and a pad byte when the size is odd. EXIF needs the extended layout: VP8X first, its flags' bit 3 set.
  if (webp.size() < 12 + 8 + 10 || !fourcc_is(webp, 0, "RIFF") || !fourcc_is(webp, 8, "WEBP")) return 1;
  const size_t end = std::min<size_t>(webp.size(), size_t{little32(webp, 4)} + 8);
  if (!fourcc_is(webp, 12, "VP8X") || little32(webp, 16) < 10 || (webp[20] & 0x08) == 0) return 1;
  for (size_t at = 12; end >= at && end - at >= 8;) {
    const size_t size = little32(webp, at + 4);
    if (size > end - at - 8) return 1;
    if (fourcc_is(webp, at, "EXIF")) {
      std::span<const uint8_t> exif = webp.subspan(at + 8, size);
      if (starts_with(exif, kExifPrefix)) exif = exif.subspan(kExifPrefix.size());
      return exif_tiff_orientation(exif);
    }
    at += 8 + size + (size & 1);
  }
  return 1;
}

int exif_orientation(Format format, std::span<const uint8_t> bytes) {
  switch (format) {
    case Format::kJpeg:
      return jpeg_exif_orientation(bytes);
    case Format::kPng:
      return png_exif_orientation(bytes);
    case Format::kWebp:
      return webp_exif_orientation(bytes);
    case Format::kGif:
      return 1;
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
