// EXIF orientation (exif_orientation.h): JPEGs, PNGs and WebPs made here from committed fixtures (encoded by Pillow,
// libjpeg-turbo, zlib and libwebp) by writing an APP1 "Exif" segment after the JPEG's SOI, an eXIf chunk into the PNG
// (before or after IDAT) or an EXIF chunk into the WebP (turned into the extended layout), one per Orientation value
// and TIFF byte order, decode to the plain file's pixels turned as a viewer turns them. The expectation is built
// independently of the decoder's per-orientation formulas, from three plain operations (mirror left-right, mirror
// top-bottom, transpose) composed as the EXIF specification describes each value. Files Pillow wrote with the tag
// (exif*.png, exif*.webp) decode to Pillow's exif_transpose. Unreadable or odd EXIF leaves the image as stored.
// Planted controls: every value's image differs from the other seven values' references, and 6 is not the plain decode.
#include "image/exif_orientation.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fixtures.h"
#include "image/decode.h"

namespace duet::image {
namespace {

using testing::fixture_path;
using testing::read_bytes;
using testing::read_ppm;

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

// ---- PNG (eXIf) and WebP (EXIF) ----

void put_big32(std::vector<uint8_t>& out, uint32_t v) {
  out.insert(out.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
}

void put_little(std::vector<uint8_t>& out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

// A PNG chunk with its CRC (zlib's crc32: not duet's).
std::vector<uint8_t> png_chunk(const char (&type)[5], const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  put_big32(out, static_cast<uint32_t>(data.size()));
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(crc32(0, reinterpret_cast<const Bytef*>(type), 4), data.data(), data.size());
  put_big32(out, static_cast<uint32_t>(crc));
  return out;
}

// The EXIF block without the JPEG's "Exif\0\0": the bare TIFF block a PNG's eXIf holds.
std::vector<uint8_t> tiff_block(bool little, uint32_t value, uint32_t type = 3, uint32_t count = 1,
                                uint32_t tag = 0x0112) {
  const std::vector<uint8_t> b = exif_block(little, value, type, count, tag);
  return {b.begin() + 6, b.end()};
}

// `png` with `chunk` written after IHDR (8 + 25 bytes in) or, when `after_idat`, right before IEND (its last 12).
std::vector<uint8_t> with_png_chunk(const std::vector<uint8_t>& png, const std::vector<uint8_t>& chunk,
                                    bool after_idat = false) {
  const size_t at = after_idat ? png.size() - 12 : 33;
  std::vector<uint8_t> out = png;
  out.insert(out.begin() + static_cast<long>(at), chunk.begin(), chunk.end());
  return out;
}

// A simple (VP8 only) WebP turned into the extended layout: VP8X with `flags` and the canvas size, its image chunk,
// then an EXIF (or `fourcc`) chunk holding `exif` (padded to even), the RIFF size recomputed.
std::vector<uint8_t> extended_webp(const std::vector<uint8_t>& simple, uint32_t width, uint32_t height,
                                   const std::vector<uint8_t>& exif, uint8_t flags = 0x08,
                                   const char (&fourcc)[5] = "EXIF") {
  std::vector<uint8_t> body{'W', 'E', 'B', 'P', 'V', 'P', '8', 'X'};
  put_little(body, 10, 4);
  body.insert(body.end(), {flags, 0, 0, 0});
  put_little(body, width - 1, 3);
  put_little(body, height - 1, 3);
  body.insert(body.end(), simple.begin() + 12, simple.end());
  body.insert(body.end(), fourcc, fourcc + 4);
  put_little(body, static_cast<uint32_t>(exif.size()), 4);
  body.insert(body.end(), exif.begin(), exif.end());
  if (exif.size() % 2) body.push_back(0);
  std::vector<uint8_t> out{'R', 'I', 'F', 'F'};
  put_little(out, static_cast<uint32_t>(body.size()), 4);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// `got` equals the reference for `orientation` and none of the other seven (the planted controls).
void expect_only(const Image& got, const Image& plain, int orientation, const std::string& what) {
  for (int other = 1; other <= 8; ++other) {
    const Image ref = viewer_image(plain, other);
    const bool same = got.width == ref.width && got.height == ref.height && got.rgb == ref.rgb;
    EXPECT_EQ(same, other == orientation) << what << ": decoded as " << orientation << ", compared with " << other;
  }
}

class ExifOrientationPng : public ::testing::Test {
 protected:
  const std::vector<uint8_t> plain_bytes_ = read_bytes(fixture_path("rgb8.png"));  // 37 x 23
  const Image plain_ = decode(plain_bytes_);
};

TEST_F(ExifOrientationPng, EachValueGivesTheViewersImage) {
  ASSERT_NE(plain_.width, plain_.height);
  for (const bool after_idat : {false, true})
    for (const bool little : {true, false})
      for (int orientation = 1; orientation <= 8; ++orientation) {
        const std::string what = std::string(little ? "II" : "MM") + (after_idat ? " after IDAT" : " before IDAT");
        const std::vector<uint8_t> tagged =
            with_png_chunk(plain_bytes_, png_chunk("eXIf", tiff_block(little, orientation)), after_idat);
        EXPECT_EQ(png_exif_orientation(tagged), orientation) << what;
        expect_only(decode(tagged), plain_, orientation, what);
      }
  EXPECT_EQ(png_exif_orientation(with_png_chunk(plain_bytes_, png_chunk("eXIf", tiff_block(false, 8, 4)))), 8);
}

// Odd or broken eXIf chunks leave the image as stored (the file still decodes: libpng drops such chunks too).
TEST_F(ExifOrientationPng, UnreadableOrOddExifLeavesTheImage) {
  std::vector<std::vector<uint8_t>> chunks;
  for (std::vector<uint8_t> tiff :
       {tiff_block(true, 9), tiff_block(true, 6, 7), tiff_block(true, 6, 3, 2), tiff_block(true, 6, 3, 1, 0x0110)})
    chunks.push_back(png_chunk("eXIf", tiff));
  std::vector<uint8_t> truncated = tiff_block(false, 6);
  truncated.resize(truncated.size() - 10);  // IFD0's entry cut
  chunks.push_back(png_chunk("eXIf", truncated));
  chunks.push_back(png_chunk("eXIf", {'M', 'M'}));  // the header cut
  std::vector<uint8_t> wrong_order = tiff_block(true, 6);
  wrong_order[0] = 'X';  // neither II nor MM
  chunks.push_back(png_chunk("eXIf", wrong_order));
  std::vector<uint8_t> mixed_order = tiff_block(true, 6);
  mixed_order[1] = 'M';  // "IM"
  chunks.push_back(png_chunk("eXIf", mixed_order));
  std::vector<uint8_t> far_ifd = tiff_block(true, 6);
  far_ifd[4] = 0xF0;  // IFD0 offset past the block
  chunks.push_back(png_chunk("eXIf", far_ifd));
  std::vector<uint8_t> wrapped_ifd = tiff_block(false, 6);
  wrapped_ifd[4] = wrapped_ifd[5] = wrapped_ifd[6] = wrapped_ifd[7] = 0xFF;  // IFD0 offset 2^32 - 1
  chunks.push_back(png_chunk("eXIf", wrapped_ifd));
  std::vector<uint8_t> many_entries = tiff_block(true, 6, 3, 1, 0x0110);
  many_entries[8] = many_entries[9] = 0xFF;  // 65535 entries in a block of one (not the Orientation)
  chunks.push_back(png_chunk("eXIf", many_entries));
  std::vector<uint8_t> prefixed = exif_block(true, 6);  // "Exif\0\0" first: not a bare TIFF block
  chunks.push_back(png_chunk("eXIf", prefixed));
  std::vector<uint8_t> bad_crc = png_chunk("eXIf", tiff_block(true, 6));
  bad_crc.back() ^= 1;
  chunks.push_back(bad_crc);
  chunks.push_back(png_chunk("exIf", tiff_block(true, 6)));  // another chunk type
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<uint8_t> tagged = with_png_chunk(plain_bytes_, chunks[i]);
    EXPECT_EQ(png_exif_orientation(tagged), 1) << "case " << i;
    EXPECT_TRUE(decode(tagged).rgb == plain_.rgb) << "case " << i;
  }
  // The first eXIf is the one read: an untagged one before a tagged one leaves the image.
  const std::vector<uint8_t> twice =
      with_png_chunk(with_png_chunk(plain_bytes_, png_chunk("eXIf", tiff_block(true, 6))),
                     png_chunk("eXIf", tiff_block(true, 1, 3, 1, 0x0110)));
  EXPECT_EQ(png_exif_orientation(twice), 1);
  // A chunk length past the end, or a length over 2^31 - 1: the walk stops (the decoder refuses such a file or not).
  for (const uint8_t high : {uint8_t{0x00}, uint8_t{0x7F}, uint8_t{0xFF}}) {
    std::vector<uint8_t> cut = with_png_chunk(plain_bytes_, png_chunk("eXIf", tiff_block(true, 6)));
    cut[33] = high;
    cut[34] = 0xFF;
    EXPECT_EQ(png_exif_orientation(cut), 1);
    try {
      EXPECT_TRUE(decode(cut).rgb == plain_.rgb);
    } catch (const ImageError&) {
    }
  }
  // After IEND nothing is read.
  std::vector<uint8_t> after_end = plain_bytes_;
  const std::vector<uint8_t> late = png_chunk("eXIf", tiff_block(true, 6));
  after_end.insert(after_end.end(), late.begin(), late.end());
  EXPECT_EQ(png_exif_orientation(after_end), 1);
  EXPECT_EQ(png_exif_orientation(std::vector<uint8_t>{0x89, 'P', 'N', 'G'}), 1);
  EXPECT_EQ(png_exif_orientation(std::vector<uint8_t>{}), 1);
}

class ExifOrientationWebp : public ::testing::Test {
 protected:
  const std::vector<uint8_t> plain_bytes_ = read_bytes(fixture_path("lossy.webp"));  // 29 x 41, VP8 only
  const Image plain_ = decode(plain_bytes_);

  std::vector<uint8_t> tagged(const std::vector<uint8_t>& exif, uint8_t flags = 0x08) const {
    return extended_webp(plain_bytes_, plain_.width, plain_.height, exif, flags);
  }
};

TEST_F(ExifOrientationWebp, EachValueGivesTheViewersImage) {
  ASSERT_NE(plain_.width, plain_.height);
  for (const bool prefixed : {false, true})  // a bare TIFF block, or "Exif\0\0" first (Pillow skips one)
    for (const bool little : {true, false})
      for (int orientation = 1; orientation <= 8; ++orientation) {
        const std::string what = std::string(little ? "II" : "MM") + (prefixed ? " Exif-prefixed" : " bare");
        const std::vector<uint8_t> bytes =
            tagged(prefixed ? exif_block(little, orientation) : tiff_block(little, orientation));
        EXPECT_EQ(webp_exif_orientation(bytes), orientation) << what;
        expect_only(decode(bytes), plain_, orientation, what);
      }
}

TEST_F(ExifOrientationWebp, UnreadableOrOddExifLeavesTheImage) {
  std::vector<std::vector<uint8_t>> files;
  files.push_back(tagged(tiff_block(true, 6), /*flags=*/0x00));  // VP8X does not announce EXIF: libwebp ignores it
  files.push_back(tagged(tiff_block(true, 0)));
  files.push_back(tagged(tiff_block(false, 6, 3, 3)));
  std::vector<uint8_t> truncated = tiff_block(false, 6);
  truncated.resize(truncated.size() - 9);  // odd size: the pad byte follows
  files.push_back(tagged(truncated));
  std::vector<uint8_t> wrong_order = tiff_block(true, 6);
  wrong_order[0] = wrong_order[1] = 'Q';
  files.push_back(tagged(wrong_order));
  std::vector<uint8_t> far_ifd = tiff_block(false, 6);
  far_ifd[7] = 0x40;  // IFD0 offset past the block
  files.push_back(tagged(far_ifd));
  std::vector<uint8_t> twice_prefixed = exif_block(true, 6);  // "Exif\0\0" twice: Pillow skips one only
  twice_prefixed.insert(twice_prefixed.begin(), twice_prefixed.begin(), twice_prefixed.begin() + 6);
  files.push_back(tagged(twice_prefixed));
  for (size_t i = 0; i < files.size(); ++i) {
    EXPECT_EQ(webp_exif_orientation(files[i]), 1) << "case " << i;
    EXPECT_TRUE(decode(files[i]).rgb == plain_.rgb) << "case " << i;
  }
  // Sizes that point past the end: the EXIF chunk's, the RIFF's, VP8X's; none may read out of bounds.
  const std::vector<uint8_t> good = tagged(tiff_block(true, 6));
  const size_t exif_at = good.size() - 8 - tiff_block(true, 6).size();
  ASSERT_EQ(good[exif_at], 'E');
  for (const uint32_t size : {0x30u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    std::vector<uint8_t> bytes = good;
    for (int i = 0; i < 4; ++i) bytes[exif_at + 4 + i] = uint8_t(size >> (8 * i));
    EXPECT_EQ(webp_exif_orientation(bytes), 1) << size;
    std::vector<uint8_t> riff = good;
    for (int i = 0; i < 4; ++i) riff[4 + i] = uint8_t(size >> (8 * i));
    webp_exif_orientation(riff);  // the RIFF size is clamped to the bytes: only no out-of-bounds read is asked
    std::vector<uint8_t> vp8x = good;
    for (int i = 0; i < 4; ++i) vp8x[16 + i] = uint8_t(size >> (8 * i));
    EXPECT_EQ(webp_exif_orientation(vp8x), 1) << size;
    for (const auto& hostile : {bytes, riff, vp8x}) try {
        decode(hostile);
      } catch (const ImageError&) {
      }
  }
  // The file cut inside the EXIF chunk: not read.
  const std::vector<uint8_t> cut(good.begin(), good.end() - 5);
  EXPECT_EQ(webp_exif_orientation(cut), 1);
  // A simple WebP (no VP8X) has no EXIF.
  EXPECT_EQ(webp_exif_orientation(plain_bytes_), 1);
  EXPECT_EQ(webp_exif_orientation(std::vector<uint8_t>{'R', 'I', 'F', 'F'}), 1);
}

// A fixture's decoded image, checked against the pixels Pillow wrote beside it (NAME.ppm).
Image expect_pillows_pixels(const std::string& name, const std::vector<uint8_t>& bytes, const testing::Rgb& want) {
  const Image got = decode(bytes);
  EXPECT_EQ(got.width, want.width) << name;
  EXPECT_EQ(got.height, want.height) << name;
  EXPECT_TRUE(got.rgb == want.pixels) << name;
  return got;
}

// Files Pillow wrote with the tag (make_image_fixtures.py): duet's pixels are Pillow's exif_transpose's, and they are
// not the stored pixels (the file's header size; for 6 and 7, swapped).
TEST(ExifOrientationPillow, PngAndWebpAsExifTransposeTurnsThem) {
  for (const std::string name : {"exif3.png", "exif6.png", "exif6.webp", "exif7.webp"}) {
    const std::vector<uint8_t> bytes = read_bytes(fixture_path(name));
    const testing::Rgb want = read_ppm(fixture_path(name + ".ppm"));
    const Image got = expect_pillows_pixels(name, bytes, want);
    const int orientation = exif_orientation(got.format, bytes);
    EXPECT_EQ(orientation, name[4] - '0') << name;
    // Control: the stored pixels (turned back) are not Pillow's.
    const int back = orientation == 6 ? 8 : orientation;  // 3 and 7 undo themselves, 8 undoes 6
    const Image stored = apply_exif_orientation(got, back);
    EXPECT_FALSE(stored.width == want.width && stored.height == want.height && stored.rgb == want.pixels) << name;
  }
}

// Flipped bytes in the tagged files: an ImageError or an image of a consistent size, and no sanitizer finding.
TEST(ExifOrientationPillow, CorruptedBytesNeverCrash) {
  std::mt19937 random(20261203);
  for (const std::string name : {"exif3.png", "exif6.png", "exif6.webp", "exif7.webp"}) {
    const std::vector<uint8_t> original = read_bytes(fixture_path(name));
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<uint8_t> bytes = original;
      for (int i = 0; i < 1 + trial % 3; ++i) {
        // Half the flips land in the first 64 bytes, where the PNG's eXIf is; the rest anywhere (the WebP's is last).
        const size_t at = trial % 2 ? random() % std::min<size_t>(64, bytes.size()) : random() % bytes.size();
        bytes[at] ^= static_cast<uint8_t>(1 + random() % 255);
      }
      EXPECT_LE(exif_orientation(name.ends_with("png") ? Format::kPng : Format::kWebp, bytes), 8);
      try {
        const Image image = decode(bytes);
        EXPECT_EQ(image.rgb.size(), size_t{image.width} * image.height * 3) << name;
      } catch (const ImageError&) {
      }
    }
  }
}

// ---- XMP orientation: Pillow's fallback (Image.getexif) when the EXIF has no Orientation tag ----

std::vector<uint8_t> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

// An XMP packet as Adobe's tools and exiftool write one, tiff:Orientation as an attribute or as an element.
std::string xmp_packet(int orientation, bool element) {
  const std::string value = std::to_string(orientation);
  return std::string(
             "<?xpacket begin=\"\xEF\xBB\xBF\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?><x:xmpmeta "
             "xmlns:x=\"adobe:ns:meta/\">") +
         "<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><rdf:Description rdf:about=\"\" " +
         "xmlns:tiff=\"http://ns.adobe.com/tiff/1.0/\"" + (element ? "" : " tiff:Orientation=\"" + value + "\"") + ">" +
         (element ? "<tiff:Orientation>" + value + "</tiff:Orientation>" : "") +
         "</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end=\"w\"?>";
}

std::vector<uint8_t> zlib_bytes(std::string_view text) {
  std::vector<uint8_t> out(compressBound(text.size()));
  uLongf size = out.size();
  compress2(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()), text.size(), 9);
  out.resize(size);
  return out;
}

// PNG text chunks keyed "XML:com.adobe.xmp" (or `keyword`) as PNG 1.2 lays them out.
std::vector<uint8_t> xmp_text_chunk(const char (&type)[5], std::string_view packet,
                                    std::string_view keyword = "XML:com.adobe.xmp") {
  std::vector<uint8_t> data = bytes_of(keyword);
  data.push_back(0);
  const std::string_view kind(type, 4);
  if (kind == "tEXt") {
    data.insert(data.end(), packet.begin(), packet.end());
  } else if (kind == "zTXt") {
    data.push_back(0);  // method: zlib
    const std::vector<uint8_t> z = zlib_bytes(packet);
    data.insert(data.end(), z.begin(), z.end());
  } else {  // iTXt, uncompressed: flag 0, method 0, an empty language tag and translated keyword
    data.insert(data.end(), {0, 0, 0, 0});
    data.insert(data.end(), packet.begin(), packet.end());
  }
  return png_chunk(type, data);
}

std::vector<uint8_t> compressed_itxt(std::string_view packet) {
  std::vector<uint8_t> data = bytes_of("XML:com.adobe.xmp");
  data.insert(data.end(), {0, 1, 0, 'e', 'n', 0, 0});
  const std::vector<uint8_t> z = zlib_bytes(packet);
  data.insert(data.end(), z.begin(), z.end());
  return png_chunk("iTXt", data);
}

// A JPEG APP1 XMP segment's payload: the namespace, its NUL, the packet.
std::vector<uint8_t> xmp_app1(std::string_view packet) {
  std::vector<uint8_t> payload = bytes_of("http://ns.adobe.com/xap/1.0/");
  payload.push_back(0);
  payload.insert(payload.end(), packet.begin(), packet.end());
  return payload;
}

// `webp` (extended) with one more chunk at its end, the RIFF size recomputed.
std::vector<uint8_t> with_webp_chunk(std::vector<uint8_t> webp, const char (&fourcc)[5], std::string_view payload) {
  webp.insert(webp.end(), fourcc, fourcc + 4);
  std::vector<uint8_t> size;
  put_little(size, static_cast<uint32_t>(payload.size()), 4);
  webp.insert(webp.end(), size.begin(), size.end());
  webp.insert(webp.end(), payload.begin(), payload.end());
  if (payload.size() % 2) webp.push_back(0);
  std::vector<uint8_t> riff;
  put_little(riff, static_cast<uint32_t>(webp.size() - 8), 4);
  std::copy(riff.begin(), riff.end(), webp.begin() + 4);
  return webp;
}

TEST(XmpPacket, FindsWhatPillowsPatternFinds) {
  const std::vector<std::pair<std::string, std::optional<int>>> cases = {
      {xmp_packet(6, false), 6},
      {xmp_packet(8, true), 8},
      {"tiff:Orientation='6'", std::nullopt},  // single quotes: not the pattern
      {"tiff:Orientation = \"6\"", std::nullopt},
      {"<tiff:Orientation> 6</tiff:Orientation>", std::nullopt},
      {"tiff:orientation=\"6\"", std::nullopt},  // case matters
      {"exif:Orientation=\"6\"", std::nullopt},
      {"tiff:Orientation=\"x\" tiff:Orientation=\"3\"", 3},  // the first place where it matches
      {"<tiff:Orientation>7</tiff:Orientation> tiff:Orientation=\"5\"", 7},
      {"tiff:Orientation=\"12\"", 1},  // one digit
      {"tiff:Orientation=\"0\"", 0},
      {"tiff:Orientation>9", 9},
      {"tiff:Orientation=\"", std::nullopt},
      {"tiff:Orientation", std::nullopt},
      {"", std::nullopt},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(xmp_packet_orientation(bytes_of(text)), want) << text;
}

class XmpOrientation : public ::testing::Test {
 protected:
  const std::vector<uint8_t> png_ = read_bytes(fixture_path("rgb8.png"));      // 37 x 23
  const std::vector<uint8_t> jpeg_ = read_bytes(fixture_path("q95_444.jpg"));  // 29 x 41
  const std::vector<uint8_t> webp_ = read_bytes(fixture_path("lossy.webp"));   // 29 x 41, VP8 only
  const Image png_plain_ = decode(png_);
  const Image jpeg_plain_ = decode(jpeg_);
  const Image webp_plain_ = decode(webp_);

  // The WebP in the extended layout with `flags`, an empty JUNK chunk where extended_webp writes EXIF; the tests add
  // their chunks after it.
  std::vector<uint8_t> extended(uint8_t flags) const {
    return extended_webp(webp_, webp_plain_.width, webp_plain_.height, {}, flags, "JUNK");
  }
};

// Every value in both forms, in every place each format keeps XMP, decodes to the viewer's image of that value and
// none other (the planted controls).
TEST_F(XmpOrientation, EachValueGivesTheViewersImage) {
  for (const bool element : {false, true})
    for (int orientation = 1; orientation <= 8; ++orientation) {
      const std::string packet = xmp_packet(orientation, element);
      const std::string what = std::string(element ? "element " : "attribute ") + std::to_string(orientation);
      std::vector<std::pair<std::string, std::vector<uint8_t>>> pngs;
      for (const bool after_idat : {false, true}) {
        const std::string where = after_idat ? " after IDAT" : " before IDAT";
        pngs.push_back({"tEXt" + where, with_png_chunk(png_, xmp_text_chunk("tEXt", packet), after_idat)});
        pngs.push_back({"zTXt" + where, with_png_chunk(png_, xmp_text_chunk("zTXt", packet), after_idat)});
        pngs.push_back({"iTXt" + where, with_png_chunk(png_, xmp_text_chunk("iTXt", packet), after_idat)});
        pngs.push_back({"iTXt zlib" + where, with_png_chunk(png_, compressed_itxt(packet), after_idat)});
      }
      for (const auto& [kind, bytes] : pngs) {
        EXPECT_EQ(png_xmp_orientation(bytes), orientation) << what << ", " << kind;
        EXPECT_EQ(png_exif_orientation(bytes), 1) << "XMP is not EXIF";
        expect_only(decode(bytes), png_plain_, orientation, what + ", PNG " + kind);
      }
      const std::vector<uint8_t> jpeg = with_app1(jpeg_, xmp_app1(packet));
      EXPECT_EQ(jpeg_xmp_orientation(jpeg), orientation) << what;
      expect_only(decode(jpeg), jpeg_plain_, orientation, what + ", JPEG");
      const std::vector<uint8_t> webp = with_webp_chunk(extended(0x04), "XMP ", packet);
      EXPECT_EQ(webp_xmp_orientation(webp), orientation) << what;
      expect_only(decode(webp), webp_plain_, orientation, what + ", WebP");
    }
}

// Pillow reads XMP only when IFD0 has no Orientation tag: a tag of 1, or one Pillow cannot use (0, 9, two values),
// still wins; EXIF without the tag leaves the choice to XMP.
TEST_F(XmpOrientation, ExifsTagWinsWhateverItsValue) {
  const std::string xmp6 = xmp_packet(6, false);
  struct Tag {
    std::string what;
    uint32_t value, count, tag;
    int want;
  };
  for (const Tag& t :
       {Tag{"1", 1, 1, 0x0112, 1}, Tag{"3", 3, 1, 0x0112, 3}, Tag{"0", 0, 1, 0x0112, 1}, Tag{"9", 9, 1, 0x0112, 1},
        Tag{"two values", 6, 2, 0x0112, 1}, Tag{"no Orientation tag", 3, 1, 0x0110, 6}}) {
    const std::vector<uint8_t> png = with_png_chunk(with_png_chunk(png_, xmp_text_chunk("iTXt", xmp6)),
                                                    png_chunk("eXIf", tiff_block(true, t.value, 3, t.count, t.tag)));
    EXPECT_EQ(image_orientation(Format::kPng, png), t.want) << "PNG, EXIF " << t.what;
    expect_only(decode(png), png_plain_, t.want, "PNG, EXIF " + t.what);
    const std::vector<uint8_t> jpeg =
        with_app1(with_app1(jpeg_, xmp_app1(xmp6)), exif_block(false, t.value, 3, t.count, t.tag));
    EXPECT_EQ(image_orientation(Format::kJpeg, jpeg), t.want) << "JPEG, EXIF " << t.what;
    const std::vector<uint8_t> exif = exif_block(true, t.value, 3, t.count, t.tag);
    const std::vector<uint8_t> webp =
        with_webp_chunk(with_webp_chunk(extended(0x0C), "EXIF",
                                        std::string_view(reinterpret_cast<const char*>(exif.data()), exif.size())),
                        "XMP ", xmp6);
    EXPECT_EQ(image_orientation(Format::kWebp, webp), t.want) << "WebP, EXIF " << t.what;
  }
  // GIF has neither.
  EXPECT_EQ(image_orientation(Format::kGif, read_bytes(fixture_path("plain.gif"))), 1);
}

// Which packet Pillow keeps: a PNG's last XMP text chunk (a later one replaces an earlier one), not one whose CRC
// fails, another keyword, an iTXt that is not strict UTF-8 or whose compression is unknown, a zlib stream that inflates
// past 1 MiB; a corrupt zTXt stream is kept as empty text. A JPEG's last APP1 XMP segment; a WebP's first XMP chunk,
// and only when VP8X announces XMP.
TEST_F(XmpOrientation, ThePacketPillowKeeps) {
  const auto png_with = [&](std::initializer_list<std::vector<uint8_t>> chunks) {
    std::vector<uint8_t> png = png_;
    for (const std::vector<uint8_t>& chunk : chunks) png = with_png_chunk(png, chunk, true);  // in this order
    return png;
  };
  const std::vector<uint8_t> three = xmp_text_chunk("iTXt", xmp_packet(3, false));
  const std::vector<uint8_t> six = xmp_text_chunk("tEXt", xmp_packet(6, true));
  EXPECT_EQ(png_xmp_orientation(png_with({three, six})), 6);
  EXPECT_EQ(png_xmp_orientation(png_with({six, three})), 3);
  std::vector<uint8_t> bad_crc = six;
  bad_crc.back() ^= 1;
  EXPECT_EQ(png_xmp_orientation(png_with({three, bad_crc})), 3);
  EXPECT_EQ(png_xmp_orientation(png_with({three, xmp_text_chunk("iTXt", xmp_packet(6, false), "XML:com.adobe.xm")})),
            3);
  EXPECT_EQ(png_xmp_orientation(png_with({three, xmp_text_chunk("iTXt", xmp_packet(6, false) + "\xC0\x80")})), 3);
  std::vector<uint8_t> method = compressed_itxt(xmp_packet(6, false));
  method[8 + 18 + 1] = 1;  // iTXt's compression method (after the keyword, its NUL and the flag): unknown
  method = png_chunk("iTXt", std::vector<uint8_t>(method.begin() + 8, method.end() - 4));
  EXPECT_EQ(png_xmp_orientation(png_with({three, method})), 3);
  EXPECT_EQ(
      png_xmp_orientation(png_with({three, xmp_text_chunk("zTXt", xmp_packet(6, false) + std::string(2 << 20, ' '))})),
      3)
      << "over 1 MiB inflated: Pillow refuses the file";
  std::vector<uint8_t> corrupt = bytes_of("XML:com.adobe.xmp");
  corrupt.insert(corrupt.end(), {0, 0, 0x78, 0x9C, 0xFF, 0xFF, 0xFF, 0xFF});
  EXPECT_EQ(png_xmp_orientation(png_with({three, png_chunk("zTXt", corrupt)})), std::nullopt)
      << "a corrupt zTXt stream is kept as empty text, replacing the packet before it";
  EXPECT_EQ(png_xmp_orientation(png_), std::nullopt);

  const std::vector<uint8_t> jpeg =
      with_app1(with_app1(jpeg_, xmp_app1(xmp_packet(6, false))), xmp_app1(xmp_packet(3, false)));
  EXPECT_EQ(jpeg_xmp_orientation(jpeg), 6) << "with_app1 writes right after SOI: the 6 comes last";
  std::vector<uint8_t> app2 = with_app1(jpeg_, xmp_app1(xmp_packet(6, false)));
  app2[3] = 0xE2;
  EXPECT_EQ(jpeg_xmp_orientation(app2), std::nullopt);
  EXPECT_EQ(jpeg_xmp_orientation(with_app1(jpeg_, bytes_of("http://ns.adobe.com/xap/1.0/ tiff:Orientation=\"6\""))),
            std::nullopt)
      << "no NUL after the namespace";

  EXPECT_EQ(webp_xmp_orientation(with_webp_chunk(with_webp_chunk(extended(0x04), "XMP ", xmp_packet(6, false)), "XMP ",
                                                 xmp_packet(3, false))),
            6);
  EXPECT_EQ(webp_xmp_orientation(with_webp_chunk(extended(0x08), "XMP ", xmp_packet(6, false))), std::nullopt)
      << "VP8X without the XMP flag";
  EXPECT_EQ(webp_xmp_orientation(with_webp_chunk(webp_, "XMP ", xmp_packet(6, false))), std::nullopt) << "no VP8X";
}

// Files Pillow wrote with XMP (make_image_fixtures.py) decode to Pillow's pixels: PNG's through Debian's Pillow 9.4
// exif_transpose, JPEG's and WebP's through Pillow 11's rule written over 9.4 (xmp_transpose there); EXIF's tag beside
// XMP wins (exif1_xmp6.png stays as stored, exif3_xmp6.jpg turns by 3). Control: each is not the stored image.
TEST(XmpOrientationPillow, FilesAsExifTransposeTurnsThem) {
  for (const auto& [name, orientation] : std::vector<std::pair<std::string, int>>{{"xmp6.png", 6},
                                                                                  {"xmp8_zip.png", 8},
                                                                                  {"xmp3_late.png", 3},
                                                                                  {"exif1_xmp6.png", 1},
                                                                                  {"xmp5.jpg", 5},
                                                                                  {"exif3_xmp6.jpg", 3},
                                                                                  {"xmp7.webp", 7}}) {
    const std::vector<uint8_t> bytes = read_bytes(fixture_path(name));
    const testing::Rgb want = read_ppm(fixture_path(name + ".ppm"));
    const Image got = expect_pillows_pixels(name, bytes, want);
    EXPECT_EQ(image_orientation(got.format, bytes), orientation) << name;
    // Control: the image turned by the other orientations is not Pillow's.
    for (int other = 1; other <= 8; ++other) {
      if (other == orientation) continue;
      const std::vector<int> undo = {1, 2, 3, 4, 5, 8, 7, 6};  // the value that turns `orientation` back
      const Image stored = apply_exif_orientation(got, undo[orientation - 1]);
      const Image turned = apply_exif_orientation(stored, other);
      EXPECT_FALSE(turned.width == want.width && turned.height == want.height && turned.rgb == want.pixels)
          << name << " turned by " << other;
    }
  }
}

// Flipped bytes in the XMP files: an ImageError or an image of a consistent size, and no sanitizer finding.
TEST(XmpOrientationPillow, CorruptedBytesNeverCrash) {
  std::mt19937 random(20261204);
  for (const std::string name : {"xmp6.png", "xmp8_zip.png", "xmp3_late.png", "xmp5.jpg", "xmp7.webp"}) {
    const std::vector<uint8_t> original = read_bytes(fixture_path(name));
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> bytes = original;
      for (int i = 0; i < 1 + trial % 3; ++i)
        bytes[random() % bytes.size()] ^= static_cast<uint8_t>(1 + random() % 255);
      const Format format = name.ends_with("png")   ? Format::kPng
                            : name.ends_with("jpg") ? Format::kJpeg
                                                    : Format::kWebp;
      const int orientation = image_orientation(format, bytes);
      EXPECT_TRUE(orientation >= 1 && orientation <= 8) << name;
      try {
        const Image image = decode(bytes);
        EXPECT_EQ(image.rgb.size(), size_t{image.width} * image.height * 3) << name;
      } catch (const ImageError&) {
      }
    }
  }
}

}  // namespace
}  // namespace duet::image
