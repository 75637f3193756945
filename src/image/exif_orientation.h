#pragma once
// EXIF orientation (docs/vision.md 2.1, open question 1): cameras store the sensor's pixels and say in the EXIF
// Orientation tag (0x0112) how to turn them for display. Browsers, viewers and transformers' own image loader
// (load_image: ImageOps.exif_transpose) show the turned image, so duet reads that one: the tag is read from the file's
// bytes here (no EXIF library), and the decoded pixels are turned before smart_resize sees their size. The EXIF block
// comes from where Pillow's getexif finds it: a JPEG's APP1 "Exif" segment, a PNG's eXIf chunk, a WebP's EXIF chunk;
// one reader (exif_tiff_orientation) reads the TIFF block inside each. When the EXIF has no Orientation tag, the XMP
// packet's tiff:Orientation is read instead, as Pillow's Image.getexif falls back to it (Pillow 11 and later for every
// format; Debian's Pillow 9.4 reads only PNG's). What cannot be read leaves the pixels as stored: never a refusal, as
// Pillow's exif_transpose leaves an image without a readable tag.
#include <cstdint>
#include <optional>
#include <span>

#include "image/image.h"

namespace duet::image {

// The Orientation in IFD0 of a TIFF block (its "II" or "MM" header first), 1 to 8; 1 (as stored) when the block or the
// tag cannot be read, or the tag holds another value or several values (Pillow's exif_transpose then leaves the image).
int exif_tiff_orientation(std::span<const uint8_t> tiff);

// The Orientation of the first APP1 "Exif" segment before the scan; 1 when there is none.
int jpeg_exif_orientation(std::span<const uint8_t> jpeg);

// The Orientation of the first eXIf chunk (before or after the image data: Pillow reads both) whose CRC holds (libpng
// discards one whose CRC fails); 1 when there is none. The chunk is a bare TIFF block (PNG 1.5 eXIf): one that starts
// "Exif\0\0" is not read, as libpng drops it ("incorrect byte-order specifier") and Pillow cannot parse it.
int png_exif_orientation(std::span<const uint8_t> png);

// The Orientation of the first EXIF chunk of an extended WebP (VP8X first) whose VP8X flags announce EXIF (libwebp's
// demux, which Pillow reads chunks through, keeps it only then); one leading "Exif\0\0" is skipped, as Pillow's
// Exif.load skips it. 1 when there is none.
int webp_exif_orientation(std::span<const uint8_t> webp);

// The EXIF orientation of `bytes` read as `format` (above); 1 for GIF, which has no EXIF.
int exif_orientation(Format format, std::span<const uint8_t> bytes);

// The digit after the first `tiff:Orientation="` or `tiff:Orientation>` of an XMP packet (its attribute and element
// forms), as Pillow's getexif finds it with re.search(r'tiff:Orientation(="|>)([0-9])', packet); nullopt when neither
// form is there.
std::optional<int> xmp_packet_orientation(std::span<const uint8_t> xmp);

// The XMP orientation of the last text chunk (tEXt, zTXt or iTXt, before or after the image data) keyed
// "XML:com.adobe.xmp" whose CRC holds and that Pillow keeps: zlib streams inflated up to 1 MiB (a corrupt zTXt stream
// is kept as empty text), iTXt in strict UTF-8; nullopt when there is none.
std::optional<int> png_xmp_orientation(std::span<const uint8_t> png);

// The XMP orientation of the last APP1 segment "http://ns.adobe.com/xap/1.0/\0" before the scan (the packet follows
// the NUL); nullopt when there is none.
std::optional<int> jpeg_xmp_orientation(std::span<const uint8_t> jpeg);

// The XMP orientation of the first "XMP " chunk of an extended WebP whose VP8X flags announce XMP (bit 2); nullopt
// when there is none.
std::optional<int> webp_xmp_orientation(std::span<const uint8_t> webp);

// How `bytes` (read as `format`) ask to be turned, 1 to 8: the EXIF Orientation tag when IFD0 has one, whatever its
// value (1 unless it is one value from 1 to 8; Pillow then never looks at XMP), else the XMP orientation (1 unless it
// is 1 to 8).
int image_orientation(Format format, std::span<const uint8_t> bytes);

// `image` turned as EXIF orientation `orientation` asks, as Pillow's exif_transpose turns it: 2 mirrors left-right,
// 3 turns 180 degrees, 4 mirrors top-bottom, 5 transposes (swaps x and y), 6 turns 90 degrees clockwise, 7
// transposes over the other diagonal, 8 turns 90 degrees anticlockwise; 5 to 8 swap width and height. Other values
// leave it as it is.
Image apply_exif_orientation(Image image, int orientation);

}  // namespace duet::image
