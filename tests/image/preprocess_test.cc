// The processor's steps after decoding (docs/vision.md 2.2-2.5): smart_resize, the uint8 bicubic resize (against
// Pillow within 1 here; exactly against transformers' own resized pixels once tools/make_vision_fixtures.py has run)
// and the patch rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "fixtures.h"
#include "image/decode.h"
#include "image/patches.h"
#include "image/resize.h"
#include "image/smart_resize.h"

namespace duet::image {
namespace {

using testing::fixture_path;
using testing::read_bytes;
using testing::read_ppm;

TEST(SmartResize, RoundsHalfToEvenAsPython) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(8.5), 8);
  EXPECT_EQ(round_half_even(2.5000001), 3);
  EXPECT_EQ(round_half_even(0.49999999), 0);
}

// Expected: transformers' smart_resize as Python evaluates it (the copy in tools/make_vision_fixtures.py, which checks
// itself against the processor's grids), factor 32, the 9B's min 256*256 and max 4096*4096 pixels.
TEST(SmartResize, MatchesTransformers) {
  struct Case {
    uint32_t h, w, h_bar, w_bar;
  };
  for (const Case& c : {Case{48, 64, 224, 320}, Case{300, 200, 320, 224}, Case{37, 259, 128, 704},
                        Case{272, 320, 256, 320},  // 8.5 rounds to 8
                        Case{80, 80, 256, 256}, Case{1024, 1024, 1024, 1024}, Case{1080, 1920, 1088, 1920},
                        Case{4000, 3000, 4000, 3008}, Case{10000, 10000, 4096, 4096}, Case{5000, 100, 4992, 96},
                        Case{1, 150, 32, 3136}, Case{16, 16, 256, 256}, Case{1, 1, 256, 256},
                        Case{3000, 4000, 3008, 4000}, Case{4096, 4096, 4096, 4096}, Case{4097, 4097, 4096, 4096}}) {
    EXPECT_EQ(smart_resize(c.h, c.w, 32, 65536, 16777216), (Size{c.h_bar, c.w_bar})) << c.h << " x " << c.w;
  }
  EXPECT_EQ(smart_resize(48, 64, 32, 4096, 16384), (Size{64, 64}));
  EXPECT_EQ(smart_resize(300, 200, 32, 4096, 16384), (Size{128, 96}));
  EXPECT_EQ(smart_resize(1000, 30, 32, 4096, 16384), (Size{736, 32}));
}

TEST(SmartResize, RefusesExtremeAspectRatiosByName) {
  EXPECT_NO_THROW(smart_resize(1, 200, 32, 65536, 16777216));
  try {
    smart_resize(1, 201, 32, 65536, 16777216);
    FAIL() << "1 x 201 was accepted";
  } catch (const ImageError& error) {
    EXPECT_NE(std::string(error.what()).find("aspect ratio over 200"), std::string::npos) << error.what();
  }
  EXPECT_THROW(smart_resize(0, 10, 32, 65536, 16777216), ImageError);
}

// Pillow's resize(BICUBIC) computes the same weights in 22-bit fixed point where torch rounds them to int16, so a
// value may differ by 1; more than that, or many values, would be another algorithm (the planted control: a resize
// of the transposed image).
TEST(Resize, IsPillowsBicubicWithinOne) {
  const Image photo = decode(read_bytes(fixture_path("photo.png")));
  for (const auto& [w, h] : {std::pair{64u, 48u}, {320u, 224u}, {160u, 60u}, {97u, 120u}, {13u, 200u}, {1u, 1u}}) {
    const std::string name = "photo.png.bicubic_" + std::to_string(w) + "x" + std::to_string(h) + ".ppm";
    const testing::Rgb pillow = read_ppm(fixture_path(name));
    const Image mine = resize_bicubic(photo, w, h);
    ASSERT_EQ(mine.rgb.size(), pillow.pixels.size()) << name;
    int worst = 0;
    size_t differing = 0;
    for (size_t i = 0; i < mine.rgb.size(); ++i) {
      const int d = std::abs(int{mine.rgb[i]} - int{pillow.pixels[i]});
      worst = std::max(worst, d);
      differing += d != 0;
    }
    EXPECT_LE(worst, 1) << name;
    EXPECT_LE(differing * 20, mine.rgb.size()) << name << ": " << differing << " values differ";
  }
  // Control: the same comparison fails for a wrong resize (rows and columns of the source swapped).
  Image transposed = photo;
  std::swap(transposed.width, transposed.height);
  for (uint32_t y = 0; y < photo.height; ++y)
    for (uint32_t x = 0; x < photo.width; ++x)
      for (int c = 0; c < 3; ++c)
        transposed.rgb[(size_t{x} * photo.height + y) * 3 + c] = photo.rgb[(size_t{y} * photo.width + x) * 3 + c];
  const Image wrong = resize_bicubic(transposed, 64, 48);
  const testing::Rgb pillow = read_ppm(fixture_path("photo.png.bicubic_64x48.ppm"));
  int worst = 0;
  for (size_t i = 0; i < wrong.rgb.size(); ++i) worst = std::max(worst, std::abs(int{wrong.rgb[i]} - pillow.pixels[i]));
  EXPECT_GT(worst, 1);
}

TEST(Resize, TheSameSizeIsTheIdentity) {
  const Image photo = decode(read_bytes(fixture_path("photo.png")));
  EXPECT_EQ(resize_bicubic(photo, photo.width, photo.height).rgb, photo.rgb);
}

// Each patch row holds its own 16 x 16 pixels: an image whose pixels spell their coordinates is read back from the
// rows through docs/vision.md 2.5's layout (block raster order, 2 x 2 inside a block; columns channel, time, y, x).
TEST(Patches, RowsFollowTheMergeBlockLayout) {
  Image image;
  image.width = 96;
  image.height = 64;
  image.rgb.resize(size_t{96} * 64 * 3);
  for (uint32_t y = 0; y < 64; ++y)
    for (uint32_t x = 0; x < 96; ++x) {
      uint8_t* px = &image.rgb[(size_t{y} * 96 + x) * 3];
      px[0] = static_cast<uint8_t>(x), px[1] = static_cast<uint8_t>(y), px[2] = static_cast<uint8_t>((x + y) % 7);
    }
  const Patches patches = to_patches(image);
  ASSERT_EQ(patches.grid_h, 4u);
  ASSERT_EQ(patches.grid_w, 6u);
  ASSERT_EQ(patches.row_size, 1536u);
  ASSERT_EQ(patches.tokens(2), 6u);
  ASSERT_EQ(patches.values.size(), size_t{24} * 1536);
  auto pixel = [](float v) { return static_cast<int>(v * 127.5f + 127.5f + 0.5f); };
  for (uint32_t row = 0; row < 24; ++row) {
    const uint32_t block = row / 4, within = row % 4;
    const uint32_t r = (block / 3) * 2 + within / 2, c = (block % 3) * 2 + within % 2;  // 3 blocks per block row
    for (uint32_t ch = 0; ch < 3; ++ch)
      for (uint32_t t = 0; t < 2; ++t)
        for (uint32_t py = 0; py < 16; ++py)
          for (uint32_t px = 0; px < 16; ++px) {
            const float v = patches.values[size_t{row} * 1536 + ((ch * 2 + t) * 16 + py) * 16 + px];
            const uint32_t x = c * 16 + px, y = r * 16 + py;
            const int expected = ch == 0 ? static_cast<int>(x) : ch == 1 ? static_cast<int>(y) : (x + y) % 7;
            ASSERT_EQ(pixel(v), expected)
                << "row " << row << " channel " << ch << " t " << t << " y " << py << " x " << px;
          }
  }
}

TEST(Patches, NormaliseAsTheProcessorDoes) {
  Image image;
  image.width = image.height = 32;
  image.rgb.assign(size_t{32} * 32 * 3, 0);
  image.rgb[0] = 255, image.rgb[1] = 128, image.rgb[2] = 1;
  const Patches patches = to_patches(image);
  EXPECT_EQ(patches.values[0], 1.0f);                                                  // red of pixel (0, 0)
  EXPECT_EQ(patches.values[2 * 256], (128.0f - 127.5f) / 127.5f);                      // green (channel 1, t 0)
  EXPECT_EQ(patches.values[4 * 256], (1.0f - 127.5f) / 127.5f);                        // blue
  EXPECT_EQ(patches.values[1], -1.0f);                                                 // red of pixel (0, 1)
  EXPECT_THROW(to_patches(decode(read_bytes(fixture_path("rgb8.png")))), ImageError);  // 37 x 23
}

}  // namespace
}  // namespace duet::image
