// Decoded pixels equal Pillow's (through transformers' convert_to_rgb), for every format and layout we accept.
#include "image/decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "fixtures.h"
#include "image/alpha.h"
#include "image/format.h"

namespace duet::image {
namespace {

using testing::decodable_fixtures;
using testing::fixture_path;
using testing::read_bytes;
using testing::read_ppm;

// Where two images differ: -1 when equal, else the first differing byte (a size mismatch is byte 0).
long first_difference(const Image& image, const testing::Rgb& expected) {
  if (image.width != expected.width || image.height != expected.height) return 0;
  const auto [a, b] = std::mismatch(image.rgb.begin(), image.rgb.end(), expected.pixels.begin());
  return a == image.rgb.end() ? -1 : static_cast<long>(a - image.rgb.begin());
}

// The planted controls: what a decoder that returned BGR, or rows bottom-up, would give.
Image swap_red_blue(Image image) {
  for (size_t i = 0; i + 2 < image.rgb.size(); i += 3) std::swap(image.rgb[i], image.rgb[i + 2]);
  return image;
}

Image bottom_up(Image image) {
  const size_t row = size_t{image.width} * 3;
  for (size_t y = 0; y < image.height / 2; ++y)
    std::swap_ranges(image.rgb.begin() + static_cast<long>(y * row),
                     image.rgb.begin() + static_cast<long>((y + 1) * row),
                     image.rgb.end() - static_cast<long>((y + 1) * row));
  return image;
}

bool has_colour(const testing::Rgb& rgb) {
  for (size_t i = 0; i + 2 < rgb.pixels.size(); i += 3)
    if (rgb.pixels[i] != rgb.pixels[i + 2]) return true;
  return false;
}

class PillowReference : public ::testing::TestWithParam<std::string> {};

TEST_P(PillowReference, DecodesToPillowsPixels) {
  const std::string name = GetParam();
  const Image image = decode(read_bytes(fixture_path(name)));
  const testing::Rgb expected = read_ppm(fixture_path(name + ".ppm"));
  ASSERT_EQ(image.width, expected.width) << name;
  ASSERT_EQ(image.height, expected.height) << name;
  const long at = first_difference(image, expected);
  EXPECT_EQ(at, -1) << name << ": byte " << at << " is " << int(image.rgb[at]) << ", Pillow has "
                    << int(expected.pixels[at]);
  // The controls must fail the same comparison.
  if (has_colour(expected)) {
    EXPECT_NE(first_difference(swap_red_blue(image), expected), -1) << name << ": the channel-swap control passed";
  }
  EXPECT_NE(first_difference(bottom_up(image), expected), -1) << name << ": the bottom-up control passed";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PillowReference, ::testing::ValuesIn(decodable_fixtures()), [](const auto& info) {
  std::string name = info.param;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
});

TEST(ImageDecode, FormatAndAlphaAreReported) {
  EXPECT_EQ(decode(read_bytes(fixture_path("rgb8.png"))).format, Format::kPng);
  EXPECT_FALSE(decode(read_bytes(fixture_path("rgb8.png"))).had_alpha);
  EXPECT_TRUE(decode(read_bytes(fixture_path("rgba8.png"))).had_alpha);
  EXPECT_TRUE(decode(read_bytes(fixture_path("palette_trns.png"))).had_alpha);
  EXPECT_EQ(decode(read_bytes(fixture_path("q80_420.jpg"))).format, Format::kJpeg);
  EXPECT_EQ(decode(read_bytes(fixture_path("lossy.webp"))).format, Format::kWebp);
  EXPECT_TRUE(decode(read_bytes(fixture_path("transparent.gif"))).had_alpha);
  EXPECT_EQ(decode(read_bytes(fixture_path("plain.gif"))).format, Format::kGif);
}

TEST(ImageDecode, SniffsSignaturesOnly) {
  using namespace std::literals;
  auto sniff_text = [](std::string_view text) {
    return sniff({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  };
  EXPECT_EQ(sniff_text("\x89PNG\r\n\x1a\n"sv), Format::kPng);
  EXPECT_EQ(sniff_text("\xff\xd8\xff\xe0"sv), Format::kJpeg);
  EXPECT_EQ(sniff_text("RIFF\x10\0\0\0WEBPVP8 "sv), Format::kWebp);
  EXPECT_EQ(sniff_text("GIF89a"sv), Format::kGif);
  EXPECT_EQ(sniff_text("GIF87a"sv), Format::kGif);
  EXPECT_FALSE(sniff_text("RIFF\x10\0\0\0WAVE"sv));
  EXPECT_FALSE(sniff_text("\x89PNG"sv));
  EXPECT_FALSE(sniff_text("GIF88a"sv));
  EXPECT_FALSE(sniff_text(""sv));
}

TEST(ImageAlpha, TheColourUnderAnyAlphaIsKept) {
  // Two RGBA pixels, one fully transparent: the processor sees the stored colours (alpha.h), never white.
  const std::vector<uint8_t> rgba = {10, 20, 30, 0, 200, 100, 50, 255};
  EXPECT_EQ(drop_alpha(rgba), (std::vector<uint8_t>{10, 20, 30, 200, 100, 50}));
}

}  // namespace
}  // namespace duet::image
