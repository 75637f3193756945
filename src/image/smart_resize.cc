#include "image/smart_resize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "image/image.h"

namespace duet::image {

double round_half_even(double x) {
  const double floor = std::floor(x);
  const double rest = x - floor;
  if (rest > 0.5) return floor + 1;
  if (rest < 0.5) return floor;
  return std::fmod(floor, 2.0) == 0 ? floor : floor + 1;
}

Size smart_resize(uint32_t height, uint32_t width, uint32_t factor, uint64_t min_pixels, uint64_t max_pixels) {
  if (height == 0 || width == 0) throw ImageError(fmt::format("image: its size is {} x {}", width, height));
  const double h = height, w = width, f = factor;
  if (std::max(h, w) / std::min(h, w) > 200)
    throw ImageError(fmt::format("image: {} x {} pixels, an aspect ratio over 200", width, height));
  double h_bar = round_half_even(h / f) * f;
  double w_bar = round_half_even(w / f) * f;
  if (h_bar * w_bar > static_cast<double>(max_pixels)) {
    const double beta = std::sqrt((h * w) / static_cast<double>(max_pixels));
    h_bar = std::max(f, std::floor(h / beta / f) * f);
    w_bar = std::max(f, std::floor(w / beta / f) * f);
  } else if (h_bar * w_bar < static_cast<double>(min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = std::ceil(h * beta / f) * f;
    w_bar = std::ceil(w * beta / f) * f;
  }
  return {static_cast<uint32_t>(h_bar), static_cast<uint32_t>(w_bar)};
}

}  // namespace duet::image
