#pragma once
// The processor's resize (docs/vision.md 2.3): torch's uint8 antialiased bicubic on the CPU, which torchvision calls
// for the Qwen3.5 processor: Keys cubic a = -0.5 over PIL's support, weights normalised in double and rounded to
// int16 at the largest precision the axis allows, horizontal pass then vertical, each rounded and clamped to uint8.
#include <cstdint>

#include "image/image.h"

namespace duet::image {

// image.rgb resized to width x height (both at least 1). A pass whose side does not change is skipped.
Image resize_bicubic(const Image& image, uint32_t width, uint32_t height);

}  // namespace duet::image
