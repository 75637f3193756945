// Hostile input gets a clean ImageError naming what is wrong, never a crash (the sanitizer build runs this too):
// bombs declared in headers, zero sizes, wrong magic, truncations and flipped bytes of every fixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "fixtures.h"
#include "image/decode.h"

namespace duet::image {
namespace {

using testing::decodable_fixtures;
using testing::fixture_path;
using testing::read_bytes;
using testing::read_ppm;

// The message of the ImageError that decoding throws, or "(decoded)".
std::string refusal(const std::vector<uint8_t>& bytes, const Limits& limits = {}) {
  try {
    decode(bytes, limits);
  } catch (const ImageError& error) {
    return error.what();
  }
  return "(decoded)";
}

struct HostileCase {
  const char* file;
  const char* says;  // a part of the message
};

class Hostile : public ::testing::TestWithParam<HostileCase> {};

TEST_P(Hostile, IsRefusedByName) {
  const std::string message = refusal(read_bytes(fixture_path(std::string("hostile/") + GetParam().file)));
  EXPECT_NE(message.find(GetParam().says), std::string::npos) << GetParam().file << ": " << message;
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, Hostile,
    ::testing::Values(HostileCase{"bomb_100000x100000.png", "PNG image: 100000 x 100000 pixels, a side over the limit"},
                      HostileCase{"tall_1x100000.png", "PNG image: 1 x 100000 pixels, a side over the limit"},
                      HostileCase{"zero_width.png", "PNG image: "},
                      HostileCase{"garbage_after_ihdr.png", "PNG image: "},
                      HostileCase{"bad_ihdr_crc.png", "PNG image: "}, HostileCase{"no_idat.png", "PNG image: "},
                      HostileCase{"bomb_65500x65500.jpg", "JPEG image: 65500 x 65500 pixels, a side over the limit"},
                      HostileCase{"garbage_after_soi.jpg", "JPEG image: "},
                      HostileCase{"screen_65535x65535.gif", "GIF image: 65535 x 65535 pixels, a side over the limit"},
                      HostileCase{"riff_only.webp", "WebP image: "},
                      HostileCase{"text.txt", "not a PNG, JPEG, WebP or GIF file (its first bytes are 68656c6c"},
                      HostileCase{"bmp.bmp", "not a PNG, JPEG, WebP or GIF file"},
                      HostileCase{"empty.bin", "image: no bytes"}),
    [](const auto& info) {
      std::string name = info.param.file;
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
      return name;
    });

TEST(ImageLimits, PixelsAreCheckedFromTheHeaderBeforeDecoding) {
  for (const std::string name : {"rgb8.png", "q80_420.jpg", "lossy.webp", "plain.gif"}) {
    Limits limits;
    limits.max_pixels = 100;
    EXPECT_NE(refusal(read_bytes(fixture_path(name)), limits).find("pixels, over the limit of 100"), std::string::npos)
        << name;
    limits = {};
    limits.max_side = 16;
    EXPECT_NE(refusal(read_bytes(fixture_path(name)), limits).find("a side over the limit of 16"), std::string::npos)
        << name;
    limits = {};
    limits.max_bytes = 100;
    EXPECT_NE(refusal(read_bytes(fixture_path(name)), limits).find("bytes, over the limit of 100"), std::string::npos)
        << name;
  }
}

// Every prefix of every fixture: refused, or (a prefix that holds the whole first image) decoded to the same pixels.
TEST(ImageHostile, TruncatedFilesAreRefusedOrComplete) {
  for (const std::string& name : decodable_fixtures()) {
    const std::vector<uint8_t> bytes = read_bytes(fixture_path(name));
    const testing::Rgb expected = read_ppm(fixture_path(name + ".ppm"));
    for (size_t length = 0; length < bytes.size(); length += 1 + length / 16) {
      const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(length));
      try {
        const Image image = decode(prefix);
        EXPECT_GT(length, bytes.size() / 2) << name << " cut at " << length << " decoded";
        EXPECT_EQ(image.rgb, expected.pixels) << name << " cut at " << length << " decoded to other pixels";
      } catch (const ImageError& error) {
        EXPECT_GT(std::string(error.what()).size(), 10u) << name;
      }
    }
  }
}

// Flipped bytes anywhere: an ImageError or an image of a consistent size, and no sanitizer finding.
TEST(ImageHostile, CorruptedBytesNeverCrash) {
  std::mt19937 random(20261202);
  Limits limits;
  limits.max_pixels = 1 << 20;
  for (const std::string& name : decodable_fixtures()) {
    const std::vector<uint8_t> original = read_bytes(fixture_path(name));
    for (int trial = 0; trial < 150; ++trial) {
      std::vector<uint8_t> bytes = original;
      const int flips = 1 + trial % 4;
      for (int i = 0; i < flips; ++i) bytes[random() % bytes.size()] ^= static_cast<uint8_t>(1 + random() % 255);
      try {
        const Image image = decode(bytes, limits);
        EXPECT_EQ(image.rgb.size(), size_t{image.width} * image.height * 3) << name;
      } catch (const ImageError&) {
      }
    }
  }
}

}  // namespace
}  // namespace duet::image
