#pragma once
// A resized image as the vision tower's input rows (docs/vision.md 2.4-2.5): rescale and normalise fused in float32
// as transformers' torchvision backend does them, the still image repeated over the temporal patch, rows in 2x2
// merge-block order, each row (channel, time, y, x).
#include <array>
#include <cstdint>
#include <vector>

#include "image/image.h"

namespace duet::image {

struct PatchLayout {
  uint32_t patch = 16;
  uint32_t temporal = 2;
  uint32_t merge = 2;
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};
  double rescale = 1.0 / 255.0;
};

struct Patches {
  uint32_t grid_t = 1, grid_h = 0, grid_w = 0;  // image_grid_thw, in patches
  uint32_t row_size = 0;                        // 3 * temporal * patch * patch
  std::vector<float> values;                    // (grid_t * grid_h * grid_w, row_size)
  uint32_t tokens(uint32_t merge) const { return grid_t * grid_h * grid_w / (merge * merge); }
};

// The image's sides must be multiples of patch * merge (smart_resize's output); throws ImageError otherwise.
Patches to_patches(const Image& resized, const PatchLayout& layout = {});

}  // namespace duet::image
