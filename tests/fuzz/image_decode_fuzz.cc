// Untrusted image bytes (a request's data: URL, decoded): decode() must refuse or decode, within its limits, without
// a sanitizer finding. Seeds: tests/image/fixtures (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_targets.h"
#include "image/data_url.h"
#include "image/decode.h"

int duet::fuzz::image_decode(const uint8_t* data, size_t size) {
  duet::image::Limits limits;
  limits.max_pixels = 1 << 22;  // a fuzzer's bomb must stay cheap
  try {
    const duet::image::Image image = duet::image::decode({data, size}, limits);
    if (image.rgb.size() != size_t{image.width} * image.height * 3) __builtin_trap();
  } catch (const duet::image::ImageError&) {
  }
  try {
    duet::image::parse_data_url(std::string(reinterpret_cast<const char*>(data), size), 1 << 20);
  } catch (const duet::image::ImageError&) {
  }
  return 0;
}
