// JPEG through libjpeg-turbo with its defaults (ISLOW IDCT, fancy upsampling), the library and settings Debian's
// Pillow decodes with, so the pixels are Pillow's. Gray and YCbCr come out as RGB; CMYK/YCCK are refused by name.
// A file that ends early is refused (libjpeg only warns and pads with gray; Pillow raises "image file is truncated").
#include <fmt/format.h>
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <vector>

#include "image/decoders.h"

namespace duet::image {
namespace {

// libjpeg reports errors through error_exit, which must not return: a longjmp back to read_jpeg()'s setjmp. That
// function has no object with a destructor of its own; what it fills lives in the caller's frame.
struct JpegRun {
  jpeg_error_mgr manager;  // first, so that the error manager pointer is the run
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void libjpeg_error(j_common_ptr cinfo) {
  auto* run = reinterpret_cast<JpegRun*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, run->message);
  std::longjmp(run->jump, 1);
}

void libjpeg_message(j_common_ptr cinfo, int level) {
  // Warnings are level -1; the only one we refuse is the end of the data before the image's end.
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) libjpeg_error(cinfo);
}

struct JpegOutput {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

// False after a libjpeg error (run.message says which); throws ImageError for limits and unsupported colour spaces.
bool read_jpeg(jpeg_decompress_struct& cinfo, JpegRun& run, std::span<const uint8_t> bytes, const Limits& limits,
               JpegOutput& out) {
  if (setjmp(run.jump)) return false;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  check_size(Format::kJpeg, cinfo.image_width, cinfo.image_height, limits);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK)
    throw ImageError("JPEG image: CMYK colour is not supported");
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3 || cinfo.output_width != cinfo.image_width ||
      cinfo.output_height != cinfo.image_height)
    throw ImageError("JPEG image: unexpected output layout");
  out.width = cinfo.output_width;
  out.height = cinfo.output_height;
  out.pixels.resize(size_t{out.width} * out.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels.data() + size_t{cinfo.output_scanline} * out.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  return true;
}

}  // namespace

Image decode_jpeg(std::span<const uint8_t> bytes, const Limits& limits) {
  jpeg_decompress_struct cinfo{};
  JpegRun run;
  cinfo.err = jpeg_std_error(&run.manager);
  run.manager.error_exit = libjpeg_error;
  run.manager.emit_message = libjpeg_message;
  jpeg_create_decompress(&cinfo);
  struct Destroy {
    jpeg_decompress_struct& cinfo;
    ~Destroy() { jpeg_destroy_decompress(&cinfo); }
  } destroy{cinfo};
  JpegOutput out;
  if (!read_jpeg(cinfo, run, bytes, limits, out)) throw ImageError(fmt::format("JPEG image: {}", run.message));
  Image image;
  image.format = Format::kJpeg;
  image.width = out.width;
  image.height = out.height;
  image.rgb = std::move(out.pixels);
  return image;
}

}  // namespace duet::image
