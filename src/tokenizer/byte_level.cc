#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int, 324> to_byte{};  // the alphabet's characters all lie below U+0144
  Tables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100 and up, in byte order.
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : char32_t(256 + shifted++);
      to_byte[to_char[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

std::optional<std::string> byte_level_decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    if (utf8_char_len(token, i) == 0) return std::nullopt;
    const char32_t cp = utf8_next(token, i);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.to_byte[cp]));
  }
  return out;
}

std::string token_bytes(std::string_view token) {
  auto bytes = byte_level_decode(token);
  return bytes ? std::move(*bytes) : std::string(token);
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) utf8_append(out, byte_to_char(b));
  return out;
}

}  // namespace duet::tokenizer
