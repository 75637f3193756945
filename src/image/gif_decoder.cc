// GIF's first frame through giflib, record by record (never DGifSlurp, which would decode every frame first): the
// logical screen and the frame are size-checked before any pixel is decoded. Palette indices become RGB, the
// graphic control extension's transparent index included: it keeps its palette colour, as Pillow's convert("RGB")
// does (alpha.h). The screen outside the first frame takes the transparent index when there is one, else index 0,
// as Pillow fills it (not the background colour).
#include <fmt/format.h>
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "image/decoders.h"

namespace duet::image {
namespace {

struct GifSource {
  std::span<const uint8_t> bytes;
  size_t at = 0;
};

int giflib_read(GifFileType* gif, GifByteType* out, int n) {
  auto* source = static_cast<GifSource*>(gif->UserData);
  const size_t take = std::min(static_cast<size_t>(n < 0 ? 0 : n), source->bytes.size() - source->at);
  std::memcpy(out, source->bytes.data() + source->at, take);
  source->at += take;
  return static_cast<int>(take);
}

[[noreturn]] void fail_gif(int code, const char* what) {
  const char* reason = GifErrorString(code);
  throw ImageError(fmt::format("GIF image: {} ({})", what, reason != nullptr ? reason : "unknown error"));
}

}  // namespace

Image decode_gif(std::span<const uint8_t> bytes, const Limits& limits) {
  GifSource source{bytes};
  int error = 0;
  GifFileType* gif = DGifOpen(&source, giflib_read, &error);
  if (gif == nullptr) fail_gif(error, "cannot read its header");
  struct Close {
    GifFileType* gif;
    ~Close() {
      int ignored = 0;
      DGifCloseFile(gif, &ignored);
    }
  } close{gif};
  check_size(Format::kGif, static_cast<uint64_t>(gif->SWidth), static_cast<uint64_t>(gif->SHeight), limits);
  const size_t width = static_cast<size_t>(gif->SWidth), height = static_cast<size_t>(gif->SHeight);
  int transparent = -1;
  for (;;) {
    GifRecordType record;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) fail_gif(gif->Error, "cannot read a record");
    if (record == TERMINATE_RECORD_TYPE) throw ImageError("GIF image: it has no frame");
    if (record == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) fail_gif(gif->Error, "cannot read an extension");
      if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr && block[0] >= 4 && (block[1] & 1) != 0)
        transparent = block[4];
      while (block != nullptr)
        if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) fail_gif(gif->Error, "cannot read an extension");
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) fail_gif(gif->Error, "cannot read the frame's descriptor");
    const GifImageDesc& frame = gif->Image;
    if (frame.Width <= 0 || frame.Height <= 0) throw ImageError("GIF image: its first frame is empty");
    check_size(Format::kGif, static_cast<uint64_t>(frame.Width), static_cast<uint64_t>(frame.Height), limits);
    const ColorMapObject* colors = frame.ColorMap != nullptr ? frame.ColorMap : gif->SColorMap;
    if (colors == nullptr || colors->Colors == nullptr) throw ImageError("GIF image: it has no colour table");
    // The canvas in RGB, then the frame's rows written into it (interlaced rows come in four passes).
    std::vector<uint8_t> rgb(width * height * 3);
    const int fill = transparent >= 0 ? transparent : 0;
    auto put = [&](size_t at, int index) {
      const bool known = index >= 0 && index < colors->ColorCount;
      const GifColorType color = known ? colors->Colors[index] : GifColorType{0, 0, 0};
      rgb[at] = color.Red;
      rgb[at + 1] = color.Green;
      rgb[at + 2] = color.Blue;
    };
    for (size_t i = 0; i < width * height; ++i) put(i * 3, fill);
    std::vector<GifPixelType> line(static_cast<size_t>(frame.Width));
    const int starts[4] = {0, 4, 2, 1}, steps[4] = {8, 8, 4, 2};
    const int passes = frame.Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      const int start = frame.Interlace ? starts[pass] : 0, step = frame.Interlace ? steps[pass] : 1;
      for (int y = start; y < frame.Height; y += step) {
        if (DGifGetLine(gif, line.data(), frame.Width) == GIF_ERROR) fail_gif(gif->Error, "cannot decode its pixels");
        const long row = static_cast<long>(frame.Top) + y;
        if (row < 0 || row >= static_cast<long>(height)) continue;
        for (int x = 0; x < frame.Width; ++x) {
          const long column = static_cast<long>(frame.Left) + x;
          if (column >= 0 && column < static_cast<long>(width)) put((row * width + column) * 3, line[x]);
        }
      }
    }
    Image image;
    image.format = Format::kGif;
    image.width = static_cast<uint32_t>(width);
    image.height = static_cast<uint32_t>(height);
    image.had_alpha = transparent >= 0;
    image.rgb = std::move(rgb);
    return image;
  }
}

}  // namespace duet::image
