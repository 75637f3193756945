#pragma once
// A decoded still image: 8-bit RGB, row-major, what the Qwen3.5 processor resizes (docs/vision.md, 2.1).
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace duet::image {

enum class Format { kPng, kJpeg, kWebp, kGif };

const char* format_name(Format format);

struct Image {
  Format format = Format::kPng;
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgb;  // (height, width, 3)
  bool had_alpha = false;    // it had an alpha channel or a transparent colour (dropped: alpha.h)
};

// Every refusal of an image: its message names the format (when known) and what is wrong, for a 400 that names the
// request's part.
class ImageError : public Error {
 public:
  using Error::Error;
};

}  // namespace duet::image
