// WebP (lossy or lossless, still) through libwebp's simple API, fancy upsampling as Pillow's decoder has it; an
// animated WebP is refused by name (its first frame needs the demux API: later).
#include <fmt/format.h>
#include <webp/decode.h>

#include <vector>

#include "image/alpha.h"
#include "image/decoders.h"

namespace duet::image {
namespace {

const char* status_name(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "the data is corrupt";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "an unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the file ends early (truncated)";
  }
  return "unknown error";
}

}  // namespace

Image decode_webp(std::span<const uint8_t> bytes, const Limits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) throw ImageError(fmt::format("WebP image: {}", status_name(status)));
  if (features.width <= 0 || features.height <= 0)
    throw ImageError(fmt::format("WebP image: its size is {} x {}", features.width, features.height));
  check_size(Format::kWebp, static_cast<uint64_t>(features.width), static_cast<uint64_t>(features.height), limits);
  if (features.has_animation) throw ImageError("WebP image: animated WebP is not supported");
  Image image;
  image.format = Format::kWebp;
  image.width = static_cast<uint32_t>(features.width);
  image.height = static_cast<uint32_t>(features.height);
  image.had_alpha = features.has_alpha != 0;
  const size_t pixels = size_t{image.width} * image.height;
  std::vector<uint8_t> out(pixels * (image.had_alpha ? 4 : 3));
  const int stride = static_cast<int>(image.width * (image.had_alpha ? 4 : 3));
  const uint8_t* done = image.had_alpha ? WebPDecodeRGBAInto(bytes.data(), bytes.size(), out.data(), out.size(), stride)
                                        : WebPDecodeRGBInto(bytes.data(), bytes.size(), out.data(), out.size(), stride);
  if (done == nullptr) throw ImageError("WebP image: the data is corrupt or ends early");
  image.rgb = image.had_alpha ? drop_alpha(out) : std::move(out);
  return image;
}

}  // namespace duet::image
