#pragma once
// The committed image fixtures (make_image_fixtures.py): encoded files and the RGB Pillow decodes from them.
#include <cstdint>
#include <string>
#include <vector>

namespace duet::image::testing {

std::string fixture_path(const std::string& name);  // tests/image/fixtures/<name>
std::vector<uint8_t> read_bytes(const std::string& path);

struct Rgb {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3)
};

// A binary PPM (P6, maxval 255) as Pillow writes it.
Rgb read_ppm(const std::string& path);

// The images with a Pillow reference (<name>.ppm beside each).
const std::vector<std::string>& decodable_fixtures();

}  // namespace duet::image::testing
