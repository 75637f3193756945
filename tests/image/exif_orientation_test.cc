// EXIF orientation (exif_orientation.h): JPEGs made here from a committed fixture by writing an APP1 "Exif" segment
// after its SOI, one per Orientation value and TIFF byte order, decode to the plain file's pixels turned as a viewer
// turns them. The expectation is built independently of the decoder's per-orientation formulas, from three plain
// operations (mirror left-right, mirror top-bottom, transpose) composed as the EXIF specification describes each
// value. Unreadable or odd EXIF leaves the image as stored. Planted control: orientation 6 is not the plain decode.
#include "image/exif_orientation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fixtures.h"
#include "image/decode.h"

namespace duet::image {
namespace {

using testing::fixture_path;
using testing::read_bytes;

Image mirror_left_right(const Image& in) {
  Image out = in;
  for (uint32_t y = 0; y < in.height; ++y)
    for (uint32_t x = 0; x < in.width; ++x)
      for (int c = 0; c < 3; ++c)
        out.rgb[(size_t{y} * in.width + x) * 3 + c] = in.rgb[(size_t{y} * in.width + (in.width - 1 - x)) * 3 + c];
  return out;
}

Image mirror_top_bottom(const Image& in) {
  Image out = in;
  for (uint32_t y = 0; y < in.height; ++y)
    for (uint32_t x = 0; x < in.width; ++x)
      for (int c = 0; c < 3; ++c)
        out.rgb[(size_t{y} * in.width + x) * 3 + c] = in.rgb[(size_t{in.height - 1 - y} * in.width + x) * 3 + c];
  return out;
}

Image transpose(const Image& in) {
  Image out = in;
  out.width = in.height;
  out.height = in.width;
  for (uint32_t y = 0; y < out.height; ++y)
    for (uint32_t x = 0; x < out.width; ++x)
      for (int c = 0; c < 3; ++c)
        out.rgb[(size_t{y} * out.width + x) * 3 + c] = in.rgb[(size_t{x} * in.width + y) * 3 + c];
  return out;
}

// What a viewer shows for each Orientation (EXIF 2.3, tag 0x0112): 6 is "the 0th row is the visual right side", so
// the image turns a quarter clockwise (transpose, then mirror left-right); 8 a quarter anticlockwise (transpose, then
// mirror top-bottom); 7 both mirrors after the transpose.
Image viewer_image(const Image& stored, int orientation) {
  switch (orientation) {
    case 2:
      return mirror_left_right(stored);
    case 3:
      return mirror_top_bottom(mirror_left_right(stored));
    case 4:
      return mirror_top_bottom(stored);
    case 5:
      return transpose(stored);
    case 6:
      return mirror_left_right(transpose(stored));
    case 7:
      return mirror_top_bottom(mirror_left_right(transpose(stored)));
    case 8:
      return mirror_top_bottom(transpose(stored));
    default:
      return stored;
  }
}

void put16(std::vector<uint8_t>& out, uint32_t v, bool little) {
  if (little)
    out.insert(out.end(), {uint8_t(v), uint8_t(v >> 8)});
  else
    out.insert(out.end(), {uint8_t(v >> 8), uint8_t(v)});
}

void put32(std::vector<uint8_t>& out, uint32_t v, bool little) {
  put16(out, little ? v & 0xFFFF : v >> 16, little);
  put16(out, little ? v >> 16 : v & 0xFFFF, little);
}

// An EXIF block: the TIFF header and IFD0 with one entry (tag, type, count, value stored in the entry).
std::vector<uint8_t> exif_block(bool little, uint32_t value, uint32_t type = 3, uint32_t count = 1,
                                uint32_t tag = 0x0112) {
  std::vector<uint8_t> b{'E', 'x', 'i', 'f', 0, 0};
  b.insert(b.end(), little ? std::initializer_list<uint8_t>{'I', 'I'} : std::initializer_list<uint8_t>{'M', 'M'});
  put16(b, 42, little);
  put32(b, 8, little);  // IFD0 right after the header
  put16(b, 1, little);
  put16(b, tag, little);
  put16(b, type, little);
  put32(b, count, little);
  if (type == 3) {
    put16(b, value, little);
    put16(b, 0, little);
  } else {
    put32(b, value, little);
  }
  put32(b, 0, little);  // no next IFD
  return b;
}

// `jpeg` with an APP1 segment holding `payload` written right after its SOI.
std::vector<uint8_t> with_app1(const std::vector<uint8_t>& jpeg, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), {0xFF, 0xE1, uint8_t((payload.size() + 2) >> 8), uint8_t(payload.size() + 2)});
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

class ExifOrientation : public ::testing::Test {
 protected:
  const std::vector<uint8_t> plain_bytes_ = read_bytes(fixture_path("q95_444.jpg"));  // 29 x 41: not square
  const Image plain_ = decode(plain_bytes_);
};

TEST_F(ExifOrientation, EachValueGivesTheViewersImage) {
  ASSERT_NE(plain_.width, plain_.height);
  for (const bool little : {true, false})
    for (int orientation = 1; orientation <= 8; ++orientation) {
      const std::vector<uint8_t> tagged = with_app1(plain_bytes_, exif_block(little, orientation));
      EXPECT_EQ(jpeg_exif_orientation(tagged), orientation) << (little ? "II" : "MM");
      const Image got = decode(tagged);
      const Image want = viewer_image(plain_, orientation);
      EXPECT_EQ(got.width, want.width) << orientation;
      EXPECT_EQ(got.height, want.height) << orientation;
      EXPECT_TRUE(got.rgb == want.rgb) << "orientation " << orientation << (little ? " II" : " MM");
    }
  // A LONG value is read as a SHORT one is.
  EXPECT_EQ(jpeg_exif_orientation(with_app1(plain_bytes_, exif_block(true, 6, /*type=*/4))), 6);
}

// The planted control: the tag must change the pixels (a decoder that ignored it would pass the identity cases only).
TEST_F(ExifOrientation, QuarterTurnIsNotThePlainImage) {
  const Image turned = decode(with_app1(plain_bytes_, exif_block(true, 6)));
  EXPECT_EQ(turned.width, plain_.height);
  EXPECT_EQ(turned.height, plain_.width);
  EXPECT_FALSE(turned.rgb == plain_.rgb);
  // The reference itself: clockwise, the stored top-left pixel shows at the top right.
  const Image ref = viewer_image(plain_, 6);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(ref.rgb[(ref.width - 1) * 3 + c], plain_.rgb[c]);
}

// What cannot be read, or holds no turn, leaves the stored image: no refusal, as Pillow's exif_transpose leaves it.
TEST_F(ExifOrientation, UnreadableOrOddExifLeavesTheImage) {
  std::vector<std::vector<uint8_t>> odd{
      exif_block(true, 9),                        // out of range
      exif_block(true, 0),                        // out of range
      exif_block(true, 6, /*type=*/7),            // UNDEFINED bytes
      exif_block(true, 6, 3, /*count=*/2),        // several values
      exif_block(true, 6, 3, 1, /*tag=*/0x0110),  // another tag (Model)
  };
  std::vector<uint8_t> truncated = exif_block(false, 6);
  truncated.resize(truncated.size() - 10);  // IFD0's entry cut
  odd.push_back(truncated);
  std::vector<uint8_t> wrong_order = exif_block(true, 6);
  wrong_order[6] = 'X';  // neither II nor MM
  odd.push_back(wrong_order);
  std::vector<uint8_t> far_ifd = exif_block(true, 6);
  far_ifd[10] = 0xF0;  // IFD0 offset past the block
  odd.push_back(far_ifd);
  std::vector<uint8_t> not_exif = exif_block(true, 6);
  not_exif[0] = 'X';  // an APP1 that is not EXIF (XMP, say)
  odd.push_back(not_exif);
  for (size_t i = 0; i < odd.size(); ++i) {
    const std::vector<uint8_t> tagged = with_app1(plain_bytes_, odd[i]);
    EXPECT_EQ(jpeg_exif_orientation(tagged), 1) << "case " << i;
    EXPECT_TRUE(decode(tagged).rgb == plain_.rgb) << "case " << i;
  }
  // Segment lengths past the end, or no JPEG at all.
  std::vector<uint8_t> cut = with_app1(plain_bytes_, exif_block(true, 6));
  cut[4] = 0xFF;  // APP1 length far past the file
  EXPECT_EQ(jpeg_exif_orientation(cut), 1);
  EXPECT_EQ(jpeg_exif_orientation(std::vector<uint8_t>{0xFF, 0xD8, 0xFF}), 1);
  EXPECT_EQ(jpeg_exif_orientation(std::vector<uint8_t>{}), 1);
  // The first EXIF segment is the one read: an untagged one before a tagged one leaves the image.
  const std::vector<uint8_t> twice =
      with_app1(with_app1(plain_bytes_, exif_block(true, 6)), exif_block(true, 1, 3, 1, 0x0110));
  EXPECT_EQ(jpeg_exif_orientation(twice), 1);
}

}  // namespace
}  // namespace duet::image
