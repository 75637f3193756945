#include "image/data_url.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "image/base64.h"
#include "image/image.h"

namespace duet::image {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

bool is_data_url(std::string_view url) { return url.size() >= 5 && lower(url.substr(0, 5)) == "data:"; }

DataUrl parse_data_url(std::string_view url, size_t max_bytes) {
  if (!is_data_url(url)) throw ImageError("data URL: it does not start with \"data:\"");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) throw ImageError("data URL: no ',' before the data");
  std::string_view header = url.substr(5, comma - 5);
  const std::string_view payload = url.substr(comma + 1);
  DataUrl result;
  bool base64 = false;
  for (size_t part = 0; !header.empty() || part == 0; ++part) {
    const size_t semicolon = header.find(';');
    const std::string_view token = trim(header.substr(0, semicolon));
    header = semicolon == std::string_view::npos ? std::string_view{} : header.substr(semicolon + 1);
    if (part == 0)
      result.media_type = lower(token);
    else if (lower(token) == "base64")
      base64 = true;
  }
  if (result.media_type.empty()) throw ImageError("data URL: no media type (expected image/png, image/jpeg, ...)");
  if (result.media_type.rfind("image/", 0) != 0)
    throw ImageError(fmt::format("data URL: media type \"{}\" is not an image type", result.media_type));
  if (!base64) throw ImageError("data URL: the data is not base64 (\";base64\" is missing)");
  // 4 characters per 3 bytes: refuse from the length, before decoding anything.
  if (payload.size() / 4 * 3 > max_bytes + 2)
    throw ImageError(
        fmt::format("data URL: about {} bytes of data, over the limit of {}", payload.size() / 4 * 3, max_bytes));
  result.bytes = decode_base64(payload);
  if (result.bytes.size() > max_bytes)
    throw ImageError(fmt::format("data URL: {} bytes of data, over the limit of {}", result.bytes.size(), max_bytes));
  if (result.bytes.empty()) throw ImageError("data URL: no data");
  return result;
}

}  // namespace duet::image
