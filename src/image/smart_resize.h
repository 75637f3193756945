#pragma once
// The Qwen2-VL/Qwen3.5 processor's target size (docs/vision.md 2.2): both sides multiples of factor (patch * merge),
// the pixel count within [min_pixels, max_pixels], the aspect ratio kept as closely as that allows.
#include <cstdint>

namespace duet::image {

struct Size {
  uint32_t height = 0;
  uint32_t width = 0;
  bool operator==(const Size&) const = default;
};

// Python's round() of a double: to the nearest integer, ties to even.
double round_half_even(double x);

// transformers' smart_resize, in the same double arithmetic; throws ImageError when the aspect ratio is over 200 or
// a side is zero.
Size smart_resize(uint32_t height, uint32_t width, uint32_t factor, uint64_t min_pixels, uint64_t max_pixels);

}  // namespace duet::image
