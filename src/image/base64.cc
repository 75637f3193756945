#include "image/base64.h"

#include <fmt/format.h>

#include "image/image.h"

namespace duet::image {
namespace {

int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::vector<uint8_t> decode_base64(std::string_view text) {
  size_t end = text.size();
  size_t padding = 0;
  while (end > 0 && text[end - 1] == '=' && padding < 2) --end, ++padding;
  if (padding > 0 && text.size() % 4 != 0)
    throw ImageError(fmt::format("base64: {} characters with '=' padding, not a multiple of 4", text.size()));
  if (end % 4 == 1) throw ImageError(fmt::format("base64: {} characters cannot be whole bytes", end));
  std::vector<uint8_t> out;
  out.reserve(end / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = value_of(text[i]);
    if (v < 0) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      throw ImageError(fmt::format("base64: character {} at offset {} is not in the alphabet",
                                   c >= 0x21 && c < 0x7f ? fmt::format("'{}'", text[i]) : fmt::format("0x{:02x}", c),
                                   i));
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out.push_back(static_cast<uint8_t>(bits >> 16));
      out.push_back(static_cast<uint8_t>(bits >> 8));
      out.push_back(static_cast<uint8_t>(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) out.push_back(static_cast<uint8_t>(bits >> 4));
  if (count == 3) {
    out.push_back(static_cast<uint8_t>(bits >> 10));
    out.push_back(static_cast<uint8_t>(bits >> 2));
  }
  return out;
}

}  // namespace duet::image
