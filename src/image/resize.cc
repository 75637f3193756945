#include "image/resize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace duet::image {
namespace {

double keys_cubic(double x) {  // HelperInterpCubic::aa_filter, in its order of operations
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// One axis: for each output index its first input index, its tap count and its int16 weights (taps wide).
struct Axis {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<int32_t> weights;
  int64_t taps = 0;
  unsigned precision = 0;
};

Axis plan_axis(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double inverse = scale >= 1.0 ? 1.0 / scale : 1.0;
  Axis axis;
  axis.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  axis.first.resize(out);
  axis.count.resize(out);
  std::vector<double> real(static_cast<size_t>(out * axis.taps), 0.0);
  double largest = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    const int64_t xsize =
        std::clamp(std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin, int64_t{0}, axis.taps);
    double* w = &real[static_cast<size_t>(i * axis.taps)];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = keys_cubic((static_cast<double>(j + xmin) - center + 0.5) * inverse);
      total += w[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        largest = std::max(largest, w[j]);
      }
    axis.first[i] = xmin;
    axis.count[i] = xsize;
  }
  for (axis.precision = 0; axis.precision < 22; ++axis.precision)
    if (static_cast<int>(0.5 + largest * (1 << (axis.precision + 1))) >= (1 << 15)) break;
  axis.weights.resize(real.size());
  for (size_t k = 0; k < real.size(); ++k) {
    const double v = real[k] * (1 << axis.precision);
    axis.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return axis;
}

uint8_t sample(const Axis& axis, int64_t i, const uint8_t* source, size_t step) {
  int32_t sum = int32_t{1} << (axis.precision - 1);
  const int32_t* w = &axis.weights[static_cast<size_t>(i * axis.taps)];
  const uint8_t* s = source + static_cast<size_t>(axis.first[i]) * step;
  for (int64_t j = 0; j < axis.count[i]; ++j) sum += int32_t{s[static_cast<size_t>(j) * step]} * w[j];
  return static_cast<uint8_t>(std::clamp(sum >> axis.precision, 0, 255));
}

}  // namespace

Image resize_bicubic(const Image& image, uint32_t width, uint32_t height) {
  if (width == 0 || height == 0 || image.width == 0 || image.height == 0)
    throw ImageError(fmt::format("image: cannot resize {} x {} to {} x {}", image.width, image.height, width, height));
  Image out = image;
  if (width != image.width) {  // horizontal pass, row by row
    const Axis axis = plan_axis(image.width, width);
    Image next = out;
    next.width = width;
    next.rgb.assign(size_t{width} * out.height * 3, 0);
    for (uint32_t y = 0; y < out.height; ++y)
      for (uint32_t x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c)
          next.rgb[(size_t{y} * width + x) * 3 + c] =
              sample(axis, x, &out.rgb[size_t{y} * out.width * 3 + static_cast<size_t>(c)], 3);
    out = std::move(next);
  }
  if (height != image.height) {  // vertical pass, column by column
    const Axis axis = plan_axis(image.height, height);
    Image next = out;
    next.height = height;
    next.rgb.assign(size_t{out.width} * height * 3, 0);
    const size_t row = size_t{out.width} * 3;
    for (uint32_t y = 0; y < height; ++y)
      for (size_t k = 0; k < row; ++k) next.rgb[y * row + k] = sample(axis, y, &out.rgb[k], row);
    out = std::move(next);
  }
  return out;
}

}  // namespace duet::image
