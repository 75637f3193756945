#include "model/mrope.h"

#include <algorithm>

#include "base/error.h"

namespace duet::model {

RopePositions mrope_positions(int32_t length, std::span<const ImageRun> images, int32_t merge) {
  if (length < 0 || merge < 1) fail("M-RoPE: a prompt of {} tokens, merge {}", length, merge);
  RopePositions out;
  out.time.resize(static_cast<size_t>(length));
  out.height.resize(static_cast<size_t>(length));
  out.width.resize(static_cast<size_t>(length));
  int32_t token = 0, position = 0, highest = -1;
  const auto put = [&](int32_t t, int32_t h, int32_t w) {
    const auto i = static_cast<size_t>(token++);
    out.time[i] = t, out.height[i] = h, out.width[i] = w;
    highest = std::max({highest, t, h, w});
  };
  for (const ImageRun& image : images) {
    if (image.t < 1 || image.h < 1 || image.w < 1 || image.h % merge != 0 || image.w % merge != 0)
      fail("M-RoPE: an image grid of {} x {} x {} patches does not merge by {}", image.t, image.h, image.w, merge);
    const int32_t rows = image.h / merge, columns = image.w / merge;
    const int64_t tokens = static_cast<int64_t>(image.t) * rows * columns;
    if (image.first < token || image.first + tokens > length)
      fail("M-RoPE: an image of {} tokens at {} overlaps the one before it or leaves the {}-token prompt", tokens,
           image.first, length);
    while (token < image.first) put(position, position, position), ++position;  // the text before it
    for (int32_t f = 0; f < image.t; ++f)
      for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < columns; ++c) put(position + f, position + r, position + c);
    position += std::max(rows, columns);  // t does not advance it
  }
  while (token < length) put(position, position, position), ++position;
  out.delta = highest + 1 - length;
  return out;
}

std::vector<int32_t> mrope_streams(int64_t rotary_dim, std::span<const int64_t> section) {
  const int64_t frequencies = rotary_dim / 2;
  if (section.size() != 3 || section[0] + section[1] + section[2] != frequencies || 3 * section[1] - 2 >= frequencies ||
      3 * section[2] - 1 >= frequencies)
    fail("M-RoPE: mrope_section must be three counts summing to the {} rotary frequencies", frequencies);
  std::vector<int32_t> stream(static_cast<size_t>(frequencies), 0);
  for (int64_t j = 1; j < 3 * section[1]; j += 3) stream[static_cast<size_t>(j)] = 1;
  for (int64_t j = 2; j < 3 * section[2]; j += 3) stream[static_cast<size_t>(j)] = 2;
  return stream;
}

}  // namespace duet::model
