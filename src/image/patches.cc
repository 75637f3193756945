#include "image/patches.h"

#include <fmt/format.h>

namespace duet::image {

Patches to_patches(const Image& image, const PatchLayout& layout) {
  const uint32_t p = layout.patch, t = layout.temporal, m = layout.merge;
  if (p == 0 || t == 0 || m == 0 || image.width % (p * m) != 0 || image.height % (p * m) != 0 || image.width == 0 ||
      image.height == 0)
    throw ImageError(
        fmt::format("image: {} x {} is not a multiple of patch {} x merge {}", image.width, image.height, p, m));
  // torch: mean and std (float32 tensors) times 1 / rescale_factor, then (x - mean) / std, all in float32.
  std::array<float, 3> mean{}, std{};
  const float inverse = static_cast<float>(1.0 / layout.rescale);
  for (int c = 0; c < 3; ++c) mean[c] = layout.mean[c] * inverse, std[c] = layout.std[c] * inverse;
  Patches out;
  out.grid_h = image.height / p;
  out.grid_w = image.width / p;
  out.row_size = 3 * t * p * p;
  out.values.resize(size_t{out.grid_h} * out.grid_w * out.row_size);
  size_t row = 0;
  for (uint32_t bh = 0; bh < out.grid_h / m; ++bh)
    for (uint32_t bw = 0; bw < out.grid_w / m; ++bw)
      for (uint32_t mh = 0; mh < m; ++mh)
        for (uint32_t mw = 0; mw < m; ++mw, ++row) {
          const uint32_t y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
          float* out_row = &out.values[row * out.row_size];
          for (uint32_t c = 0; c < 3; ++c)
            for (uint32_t ti = 0; ti < t; ++ti)  // a still image: every temporal slice is the same frame
              for (uint32_t py = 0; py < p; ++py)
                for (uint32_t px = 0; px < p; ++px) {
                  const uint8_t v = image.rgb[(size_t{y0 + py} * image.width + x0 + px) * 3 + c];
                  *out_row++ = (static_cast<float>(v) - mean[c]) / std[c];
                }
        }
  return out;
}

}  // namespace duet::image
