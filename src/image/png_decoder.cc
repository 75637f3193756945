// PNG through libpng, converted as Pillow converts it: 16-bit samples to their high byte (png_set_strip_16, like
// Pillow's RGB;16B unpacker), palette and gray to RGB, alpha and tRNS dropped (alpha.h), Adam7 interlacing undone,
// gAMA/iCCP ignored.
#include <fmt/format.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "image/alpha.h"
#include "image/decoders.h"

namespace duet::image {
namespace {

// Everything libpng's callbacks touch. libpng reports errors by longjmp: read_png() below holds the setjmp and no
// object with a destructor of its own, and what it fills lives in the caller's frame (so it stays valid after a jump).
struct PngRun {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  char message[256] = {};
  std::jmp_buf jump;
  png_structp png = nullptr;
  png_infop info = nullptr;
};

void libpng_error(png_structp png, png_const_charp message) {
  auto* run = static_cast<PngRun*>(png_get_error_ptr(png));
  std::snprintf(run->message, sizeof run->message, "%s", message);
  std::longjmp(run->jump, 1);
}

void libpng_warning(png_structp, png_const_charp) {}

void libpng_read(png_structp png, png_bytep out, size_t n) {
  auto* run = static_cast<PngRun*>(png_get_io_ptr(png));
  if (run->bytes.size() - run->at < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, run->bytes.data() + run->at, n);
  run->at += n;
}

struct PngOutput {
  uint32_t width = 0, height = 0;
  bool alpha = false;
  std::vector<uint8_t> pixels;  // (height, width, alpha ? 4 : 3)
  std::vector<png_bytep> rows;
};

// False after a libpng error (run.message says which); throws ImageError when the header breaks a limit.
bool read_png(PngRun& run, const Limits& limits, PngOutput& out) {
  if (setjmp(run.jump)) return false;
  png_set_read_fn(run.png, &run, libpng_read);
  // Ancillary chunks (iCCP, zTXt) decompress into memory: bound them like the pixels.
  png_set_chunk_malloc_max(run.png, 8u << 20);
  png_read_info(run.png, run.info);
  const uint32_t width = png_get_image_width(run.png, run.info);
  const uint32_t height = png_get_image_height(run.png, run.info);
  check_size(Format::kPng, width, height, limits);
  const int color = png_get_color_type(run.png, run.info);
  const bool trns = png_get_valid(run.png, run.info, PNG_INFO_tRNS) != 0;
  png_set_strip_16(run.png);
  png_set_packing(run.png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(run.png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(run.png);
    png_set_gray_to_rgb(run.png);
  }
  if (trns) png_set_tRNS_to_alpha(run.png);
  png_set_interlace_handling(run.png);
  png_read_update_info(run.png, run.info);
  const bool alpha = (color & PNG_COLOR_MASK_ALPHA) != 0 || trns;
  const size_t channels = alpha ? 4 : 3;
  if (png_get_rowbytes(run.png, run.info) != size_t{width} * channels) png_error(run.png, "unexpected row layout");
  out.width = width;
  out.height = height;
  out.alpha = alpha;
  out.pixels.resize(size_t{height} * width * channels);
  out.rows.resize(height);
  for (uint32_t y = 0; y < height; ++y) out.rows[y] = out.pixels.data() + size_t{y} * width * channels;
  png_read_image(run.png, out.rows.data());
  return true;
}

}  // namespace

Image decode_png(std::span<const uint8_t> bytes, const Limits& limits) {
  PngRun run;
  run.bytes = bytes;
  run.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &run, libpng_error, libpng_warning);
  if (run.png == nullptr) throw ImageError("PNG image: libpng could not start");
  run.info = png_create_info_struct(run.png);
  struct Destroy {
    PngRun& run;
    ~Destroy() { png_destroy_read_struct(&run.png, run.info ? &run.info : nullptr, nullptr); }
  } destroy{run};
  if (run.info == nullptr) throw ImageError("PNG image: libpng could not start");
  PngOutput out;
  if (!read_png(run, limits, out)) throw ImageError(fmt::format("PNG image: {}", run.message));
  Image image;
  image.format = Format::kPng;
  image.width = out.width;
  image.height = out.height;
  image.had_alpha = out.alpha;
  image.rgb = out.alpha ? drop_alpha(out.pixels) : std::move(out.pixels);
  return image;
}

}  // namespace duet::image
