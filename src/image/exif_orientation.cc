#include "image/exif_orientation.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
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

// Orientation 1 to 8 as it is; anything else (no tag, 0, 9, several values) leaves the image as stored.
int usable(std::optional<int> orientation) {
  return orientation && *orientation >= 1 && *orientation <= 8 ? *orientation : 1;
}

// IFD0's Orientation entry of a TIFF block (its "II" or "MM" header first): nullopt when the block cannot be read or
// IFD0 has no such entry; its value when it is one SHORT or LONG; 0 when it holds several values or another type
// (Pillow then has the tag, a tuple, and turns nothing).
std::optional<int> tiff_orientation_tag(std::span<const uint8_t> tiff) {
  TiffReader r{tiff};
  if (!r.has(0, 8)) return std::nullopt;
  if (tiff[0] == 'I' && tiff[1] == 'I')
    r.little = true;
  else if (tiff[0] == 'M' && tiff[1] == 'M')
    r.little = false;
  else
    return std::nullopt;
  if (r.u16(2) != 42) return std::nullopt;
  const size_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return std::nullopt;
  const uint32_t entries = r.u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t{12} * i;
    if (!r.has(entry, 12)) return std::nullopt;
    if (r.u16(entry) != kOrientationTag) continue;
    const uint32_t type = r.u16(entry + 2), count = r.u32(entry + 4);
    if (count != 1) return 0;
    const uint32_t value = type == kTypeShort ? r.u16(entry + 8) : type == kTypeLong ? r.u32(entry + 8) : 0;
    return static_cast<int>(std::min<uint32_t>(value, 9));
  }
  return std::nullopt;
}

// A JPEG's marker segments up to the first scan, in order: FF, the marker, then (for most) a big-endian length
// counting itself. `visit(marker, payload)` returns true to stop.
template <typename Visit>
void jpeg_segments(std::span<const uint8_t> jpeg, Visit&& visit) {
  if (jpeg.size() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) return;
  size_t at = 2;
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xFF) return;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte before a marker
      ++at;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return;                // the scan (or the end): metadata comes before it
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      at += 2;
      continue;
    }
    const size_t length = size_t{jpeg[at + 2]} << 8 | jpeg[at + 3];
    if (length < 2 || length > jpeg.size() - at - 2) return;
    if (visit(marker, jpeg.subspan(at + 4, length - 2))) return;
    at += 2 + length;
  }
}

constexpr std::array<uint8_t, 8> kPngSignature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// A PNG's chunks up to IEND, before and after the image data: a big-endian length (at most 2^31 - 1), the type, the
// data, a CRC over type and data. `visit(type, data, crc_holds)` returns true to stop.
template <typename Visit>
void png_chunks(std::span<const uint8_t> png, Visit&& visit) {
  if (!starts_with(png, kPngSignature)) return;
  for (size_t at = kPngSignature.size(); png.size() - at >= 12;) {
    const uint32_t length = big32(png, at);
    if (length > 0x7FFFFFFFu || length > png.size() - at - 12) return;
    if (fourcc_is(png, at + 4, "IEND")) return;
    const std::span<const uint8_t> typed = png.subspan(at + 4, size_t{4} + length);
    if (visit(typed.first(4), typed.subspan(4), crc32(typed) == big32(png, at + 8 + length))) return;
    at += size_t{12} + length;
  }
}

// An extended WebP's chunks ("RIFF", the RIFF size counting from byte 8, "WEBP", then a FourCC, a little-endian size,
// the payload and a pad byte when the size is odd), when its first chunk is VP8X and VP8X's flags have `flag`
// (libwebp's demux, through which Pillow reads them, keeps EXIF and XMP chunks only then). `visit(fourcc_at, payload)`
// returns true to stop.
template <typename Visit>
void webp_chunks(std::span<const uint8_t> webp, uint8_t flag, Visit&& visit) {
  if (webp.size() < 12 + 8 + 10 || !fourcc_is(webp, 0, "RIFF") || !fourcc_is(webp, 8, "WEBP")) return;
  const size_t end = std::min<size_t>(webp.size(), size_t{little32(webp, 4)} + 8);
  if (!fourcc_is(webp, 12, "VP8X") || little32(webp, 16) < 10 || (webp[20] & flag) == 0) return;
  for (size_t at = 12; end >= at && end - at >= 8;) {
    const size_t size = little32(webp, at + 4);
    if (size > end - at - 8) return;
    if (visit(at, webp.subspan(at + 8, size))) return;
    at += 8 + size + (size & 1);
  }
}

constexpr uint8_t kWebpExifFlag = 0x08, kWebpXmpFlag = 0x04;

// The first APP1 "Exif" segment (Pillow appends later ones to it, so the first one's IFD0 is read).
std::optional<int> jpeg_exif_tag(std::span<const uint8_t> jpeg) {
  std::optional<int> tag;
  jpeg_segments(jpeg, [&](uint8_t marker, std::span<const uint8_t> payload) {
    if (marker != 0xE1 || !starts_with(payload, kExifPrefix)) return false;
    tag = tiff_orientation_tag(payload.subspan(kExifPrefix.size()));
    return true;
  });
  return tag;
}

// The first eXIf chunk, not read when its CRC fails (libpng drops it and decodes the pixels; Pillow refuses the file).
std::optional<int> png_exif_tag(std::span<const uint8_t> png) {
  std::optional<int> tag;
  png_chunks(png, [&](std::span<const uint8_t> type, std::span<const uint8_t> data, bool crc_holds) {
    if (std::memcmp(type.data(), "eXIf", 4) != 0) return false;
    if (crc_holds) tag = tiff_orientation_tag(data);
    return true;
  });
  return tag;
}

std::optional<int> webp_exif_tag(std::span<const uint8_t> webp) {
  std::optional<int> tag;
  webp_chunks(webp, kWebpExifFlag, [&](size_t at, std::span<const uint8_t> payload) {
    if (!fourcc_is(webp, at, "EXIF")) return false;
    tag = tiff_orientation_tag(starts_with(payload, kExifPrefix) ? payload.subspan(kExifPrefix.size()) : payload);
    return true;
  });
  return tag;
}

std::optional<int> exif_tag(Format format, std::span<const uint8_t> bytes) {
  switch (format) {
    case Format::kJpeg:
      return jpeg_exif_tag(bytes);
    case Format::kPng:
      return png_exif_tag(bytes);
    case Format::kWebp:
      return webp_exif_tag(bytes);
    case Format::kGif:
      return std::nullopt;
  }
  return std::nullopt;
}

std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Python's strict UTF-8 (what Pillow decodes an iTXt chunk's text with; a chunk that fails is dropped): no overlong
// forms, no surrogates, nothing past U+10FFFF.
bool strict_utf8(std::span<const uint8_t> text) {
  for (size_t i = 0; i < text.size();) {
    const uint8_t b = text[i];
    const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || n > text.size() - i) return false;
    uint32_t code = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      if ((text[i + k] & 0xC0) != 0x80) return false;
      code = code << 6 | (text[i + k] & 0x3F);
    }
    constexpr std::array<uint32_t, 5> kLeast{0, 0, 0x80, 0x800, 0x10000};
    if (code < kLeast[n] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Pillow's _safe_zlib_decompress of a text chunk: at most 1 MiB comes out (more is refused, and Pillow refuses the
// file); a stream that stops early gives what came out; corrupt data (zlib.error) gives `corrupt`.
struct Inflated {
  std::string text{};
  bool corrupt = false;
  bool too_large = false;
};

Inflated inflate_text(std::span<const uint8_t> data) {
  constexpr size_t kMaxText = size_t{1} << 20;
  Inflated out;
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return {.corrupt = true};
  out.text.resize(kMaxText);
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.text.data());
  z.avail_out = static_cast<uInt>(kMaxText);
  const int status = inflate(&z, Z_SYNC_FLUSH);
  out.corrupt = status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR;
  out.too_large = z.avail_out == 0 && z.avail_in > 0 && status != Z_STREAM_END;
  out.text.resize(kMaxText - z.avail_out);
  inflateEnd(&z);
  return out;
}

constexpr std::string_view kXmpKeyword = "XML:com.adobe.xmp";

// A tEXt, zTXt or iTXt chunk's text as Pillow keeps it in info[keyword], when its keyword is `kXmpKeyword`; nullopt
// when Pillow keeps nothing for it (another keyword, or a chunk it drops or refuses the file for).
std::optional<std::string> png_xmp_text(std::span<const uint8_t> type, std::span<const uint8_t> data) {
  const auto nul = std::find(data.begin(), data.end(), uint8_t{0});
  if (!std::equal(data.begin(), nul, kXmpKeyword.begin(), kXmpKeyword.end())) return std::nullopt;
  const std::span<const uint8_t> rest =
      nul == data.end() ? std::span<const uint8_t>{} : data.subspan(nul - data.begin() + 1);
  if (std::memcmp(type.data(), "tEXt", 4) == 0) return std::string(rest.begin(), rest.end());
  if (std::memcmp(type.data(), "zTXt", 4) == 0) {
    if (!rest.empty() && rest[0] != 0) return std::nullopt;  // another method: Pillow refuses the file
    const Inflated text = inflate_text(rest.empty() ? rest : rest.subspan(1));
    if (text.too_large) return std::nullopt;
    return text.corrupt ? std::string() : text.text;  // Pillow keeps "" for a corrupt stream
  }
  if (std::memcmp(type.data(), "iTXt", 4) != 0 || nul == data.end() || rest.size() < 2) return std::nullopt;
  // The compression flag and method, then the language tag and the translated keyword, each ended by a NUL.
  const bool compressed = rest[0] != 0;
  if (compressed && rest[1] != 0) return std::nullopt;
  std::span<const uint8_t> tail = rest.subspan(2);
  for (int field = 0; field < 2; ++field) {
    const auto end = std::find(tail.begin(), tail.end(), uint8_t{0});
    if (end == tail.end() || !strict_utf8(tail.first(end - tail.begin()))) return std::nullopt;
    tail = tail.subspan(end - tail.begin() + 1);
  }
  std::string text(tail.begin(), tail.end());
  if (compressed) {
    Inflated inflated = inflate_text(tail);
    if (inflated.corrupt || inflated.too_large) return std::nullopt;
    text = std::move(inflated.text);
  }
  if (!strict_utf8(bytes_of(text))) return std::nullopt;
  return text;
}

constexpr std::string_view kXmpApp1 = std::string_view("http://ns.adobe.com/xap/1.0/\0", 29);

}  // namespace

int exif_tiff_orientation(std::span<const uint8_t> tiff) { return usable(tiff_orientation_tag(tiff)); }

int jpeg_exif_orientation(std::span<const uint8_t> jpeg) { return usable(jpeg_exif_tag(jpeg)); }
int png_exif_orientation(std::span<const uint8_t> png) { return usable(png_exif_tag(png)); }
int webp_exif_orientation(std::span<const uint8_t> webp) { return usable(webp_exif_tag(webp)); }
int exif_orientation(Format format, std::span<const uint8_t> bytes) { return usable(exif_tag(format, bytes)); }

// Pillow's re.search(r'tiff:Orientation(="|>)([0-9])', packet): the first place where either form matches.
std::optional<int> xmp_packet_orientation(std::span<const uint8_t> xmp) {
  constexpr std::string_view kName = "tiff:Orientation";
  const std::string_view text(reinterpret_cast<const char*>(xmp.data()), xmp.size());
  const auto digit = [&](size_t at) { return at < text.size() && text[at] >= '0' && text[at] <= '9'; };
  for (size_t at = text.find(kName); at != std::string_view::npos; at = text.find(kName, at + 1)) {
    const size_t after = at + kName.size();
    if (after + 1 < text.size() && text[after] == '=' && text[after + 1] == '"' && digit(after + 2))
      return text[after + 2] - '0';
    if (after < text.size() && text[after] == '>' && digit(after + 1)) return text[after + 1] - '0';
  }
  return std::nullopt;
}

// Pillow keeps each text chunk in info[keyword] as it reads them, before and after the image data (exif_transpose
// loads the pixels first), so the last one counts.
std::optional<int> png_xmp_orientation(std::span<const uint8_t> png) {
  std::optional<std::string> packet;
  png_chunks(png, [&](std::span<const uint8_t> type, std::span<const uint8_t> data, bool crc_holds) {
    if (crc_holds)
      if (std::optional<std::string> text = png_xmp_text(type, data)) packet = std::move(text);
    return false;
  });
  return packet ? xmp_packet_orientation(bytes_of(*packet)) : std::nullopt;
}

// Pillow keeps each APP1 XMP segment's packet (what follows the namespace's NUL) in info["xmp"]: the last one counts.
std::optional<int> jpeg_xmp_orientation(std::span<const uint8_t> jpeg) {
  std::optional<std::span<const uint8_t>> packet;
  jpeg_segments(jpeg, [&](uint8_t marker, std::span<const uint8_t> payload) {
    if (marker == 0xE1 && starts_with(payload, bytes_of(kXmpApp1))) packet = payload.subspan(kXmpApp1.size());
    return false;
  });
  return packet ? xmp_packet_orientation(*packet) : std::nullopt;
}

std::optional<int> webp_xmp_orientation(std::span<const uint8_t> webp) {
  std::optional<int> orientation;
  webp_chunks(webp, kWebpXmpFlag, [&](size_t at, std::span<const uint8_t> payload) {
    if (!fourcc_is(webp, at, "XMP ")) return false;
    orientation = xmp_packet_orientation(payload);
    return true;
  });
  return orientation;
}

int image_orientation(Format format, std::span<const uint8_t> bytes) {
  if (const std::optional<int> tag = exif_tag(format, bytes)) return usable(tag);
  switch (format) {
    case Format::kJpeg:
      return usable(jpeg_xmp_orientation(bytes));
    case Format::kPng:
      return usable(png_xmp_orientation(bytes));
    case Format::kWebp:
      return usable(webp_xmp_orientation(bytes));
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
