#pragma once
// Strict standard base64 (RFC 4648 section 4): the 64-letter alphabet with + and /, '=' padding only at the end
// (optional), no whitespace. An error names the offset of the first bad character.
#include <cstdint>
#include <string_view>
#include <vector>

namespace duet::image {

// Throws ImageError("... base64 ...") on anything else.
std::vector<uint8_t> decode_base64(std::string_view text);

}  // namespace duet::image
