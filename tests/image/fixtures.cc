#include "fixtures.h"

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "../tests_dir.h"

namespace duet::image::testing {

std::string fixture_path(const std::string& name) { return duet::testing::tests_dir() + "/image/fixtures/" + name; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Rgb read_ppm(const std::string& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  std::string header;
  size_t at = 0;
  for (int fields = 0; fields < 4 && at < bytes.size();) {  // "P6", width, height, maxval, each then one whitespace
    std::string field;
    while (at < bytes.size() && !std::isspace(bytes[at])) field += static_cast<char>(bytes[at++]);
    ++at;
    if (!field.empty()) header += field + " ", ++fields;
  }
  std::istringstream fields(header);
  std::string magic;
  int maxval = 0;
  Rgb rgb;
  fields >> magic >> rgb.width >> rgb.height >> maxval;
  if (magic != "P6" || maxval != 255) throw std::runtime_error(path + ": not a P6 PPM with maxval 255");
  rgb.pixels.assign(bytes.begin() + static_cast<long>(at), bytes.end());
  if (rgb.pixels.size() != size_t{rgb.width} * rgb.height * 3) throw std::runtime_error(path + ": wrong pixel count");
  return rgb;
}

const std::vector<std::string>& decodable_fixtures() {
  static const std::vector<std::string> names = {
      "rgb8.png",        "rgba8.png",         "alpha_every_pair.png",
      "gray8.png",       "gray_alpha.png",    "palette_trns.png",
      "rgb16.png",       "rgb8_adam7.png",    "rgb8_gamma.png",
      "q95_444.jpg",     "q80_420.jpg",       "gray.jpg",
      "progressive.jpg", "lossy.webp",        "lossless_alpha.webp",
      "interlaced.gif",  "plain.gif",         "animated.gif",
      "transparent.gif", "partial_frame.gif", "partial_frame_transparent.gif"};
  return names;
}

}  // namespace duet::image::testing
