#pragma once
// A JPEG's EXIF orientation (docs/vision.md 2.1, open question 1): cameras store the sensor's pixels and say in the
// EXIF Orientation tag (0x0112) how to turn them for display. Browsers, viewers and transformers' own image loader
// (load_image: ImageOps.exif_transpose) show the turned image, so duet reads that one: the tag is read from the
// JPEG's bytes here (no EXIF library), and the decoded pixels are turned before smart_resize sees their size.
#include <cstdint>
#include <span>

#include "image/image.h"

namespace duet::image {

// The Orientation of the first APP1 "Exif" segment before the scan, 1 to 8; 1 (as stored) when there is none, or when
// the segment or the tag cannot be read or holds another value (Pillow's exif_transpose then leaves the image as is).
int jpeg_exif_orientation(std::span<const uint8_t> jpeg);

// `image` turned as EXIF orientation `orientation` asks, as Pillow's exif_transpose turns it: 2 mirrors left-right,
// 3 turns 180 degrees, 4 mirrors top-bottom, 5 transposes (swaps x and y), 6 turns 90 degrees clockwise, 7
// transposes over the other diagonal, 8 turns 90 degrees anticlockwise; 5 to 8 swap width and height. Other values
// leave it as it is.
Image apply_exif_orientation(Image image, int orientation);

}  // namespace duet::image
