#pragma once
// `data:` URLs as clients send images (`data:image/png;base64,...`): the media type must be an image type and the
// payload base64; the bytes' own signature decides the decoder later (a declared type is never trusted).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace duet::image {

struct DataUrl {
  std::string media_type;  // lower case, e.g. "image/png"
  std::vector<uint8_t> bytes;
};

bool is_data_url(std::string_view url);

// Throws ImageError naming what is wrong: not a data: URL, no or a non-image media type, not base64, bad base64, or
// more than max_bytes once decoded (refused from the text's length, before decoding).
DataUrl parse_data_url(std::string_view url, size_t max_bytes);

}  // namespace duet::image
