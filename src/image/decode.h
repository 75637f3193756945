#pragma once
// Image bytes (PNG, JPEG, WebP, GIF's first frame) to 8-bit RGB, within limits, or an ImageError naming what is wrong.
#include <cstdint>
#include <span>

#include "image/image.h"
#include "image/limits.h"

namespace duet::image {

// The format comes from the bytes' signature (sniff); the size from the header, checked against the limits before
// any pixel is decoded. Transparency is dropped, as the processor drops it (alpha.h); gamma and colour profiles are
// ignored, as Pillow ignores them. A JPEG, PNG or WebP comes turned as its EXIF Orientation tag asks
// (exif_orientation.h).
Image decode(std::span<const uint8_t> bytes, const Limits& limits = {});

}  // namespace duet::image
