#include "server/image_parts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "server/errors.h"

namespace duet::server {

namespace {
bool starts_with_no_case(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

bool is_remote(std::string_view url) {
  return starts_with_no_case(url, "http://") || starts_with_no_case(url, "https://");
}

// The checks of every image URL, wherever it came from: `url_param` names the field that holds it, `how_inline` says
// how this API sends the bytes instead of a remote URL.
ImagePart image_part_from_url(const std::optional<std::string>& url, const std::string& param,
                              const std::string& url_param, std::string_view how_inline) {
  if (!url || url->empty()) refuse_field(url_param, "missing");
  if (!is_remote(*url) && !starts_with_no_case(*url, "data:"))
    refuse_field(url_param, "expected a data: URL (data:image/png;base64,...) or an http(s) URL");
  return {param, *url, url_param, how_inline};
}

constexpr std::string_view kAsDataUrl = "as a data: URL (data:image/png;base64,...)";
}  // namespace

bool ImagePart::remote() const { return is_remote(url); }

void refuse_image_in_system(const std::string& role, const std::string& param) {
  if (role == "system" || role == "developer")
    refuse_field(param, "a system message cannot contain images (as the chat template says)");
}

ImagePart parse_image_part(const Json& part, const std::string& param, IgnoredFields& unknown) {
  check_known_fields(part, {"type", "image_url"}, {"cache_control"}, param + ".", unknown);
  const auto it = part.find("image_url");
  if (it == part.end() || it->is_null()) refuse_field(param + ".image_url", "missing");
  std::string url_param = param + ".image_url";
  std::optional<std::string> url;
  if (it->is_string()) {
    url = it->get<std::string>();
  } else if (it->is_object()) {
    check_known_fields(*it, {"url", "detail"}, {}, param + ".image_url.", unknown);
    read_string(*it, "detail", param + ".image_url.detail");  // auto, low or high: the processor decides the size
    url_param += ".url";
    url = read_string(*it, "url", url_param);
  } else {
    refuse_field(url_param, "expected an object with a url");
  }
  return image_part_from_url(url, param, url_param, kAsDataUrl);
}

ImagePart parse_input_image(const Json& part, const std::string& param, IgnoredFields& unknown) {
  check_known_fields(part, {"type", "image_url", "detail", "file_id"}, {"cache_control"}, param + ".", unknown);
  read_string(part, "detail", param + ".detail");  // auto, low or high: the processor decides the size
  if (read_string(part, "file_id", param + ".file_id"))
    refuse_field(param + ".file_id",
                 fmt::format("duet keeps no files; send the image inline in image_url {}", kAsDataUrl));
  return image_part_from_url(read_string(part, "image_url", param + ".image_url"), param, param + ".image_url",
                             kAsDataUrl);
}

ImagePart parse_image_block(const Json& block, const std::string& param, IgnoredFields& unknown) {
  check_known_fields(block, {"type", "source"}, {"cache_control"}, param + ".", unknown);
  const std::string source_param = param + ".source";
  const auto source = block.find("source");
  if (source == block.end() || source->is_null()) refuse_field(source_param, "missing");
  if (!source->is_object()) refuse_field(source_param, "expected an object");
  const auto type = read_string(*source, "type", source_param + ".type");
  if (!type) refuse_field(source_param + ".type", "missing");
  constexpr std::string_view kAsBase64 =
      "as a base64 source ({\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"...\"})";
  if (*type == "url") {
    check_known_fields(*source, {"type", "url"}, {}, source_param + ".", unknown);
    return image_part_from_url(read_string(*source, "url", source_param + ".url"), param, source_param + ".url",
                               kAsBase64);
  }
  if (*type != "base64")
    refuse_field(source_param + ".type",
                 fmt::format("`{}` image sources are not supported; send the image inline {}", *type, kAsBase64));
  check_known_fields(*source, {"type", "media_type", "data"}, {}, source_param + ".", unknown);
  const auto media_type = read_string(*source, "media_type", source_param + ".media_type");
  if (!media_type || media_type->empty()) refuse_field(source_param + ".media_type", "missing");
  // It becomes a data URL's media type: a `;` or `,` would change what the URL says.
  if (media_type->find_first_of(";, \t\r\n") != std::string::npos)
    refuse_field(source_param + ".media_type", "expected a media type such as image/png");
  const auto data = read_string(*source, "data", source_param + ".data");
  if (!data || data->empty()) refuse_field(source_param + ".data", "missing");
  return {param, fmt::format("data:{};base64,{}", *media_type, *data), source_param + ".data", kAsBase64};
}

}  // namespace duet::server
