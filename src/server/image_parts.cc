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
}  // namespace

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
  if (!url || url->empty()) refuse_field(url_param, "missing");
  if (starts_with_no_case(*url, "http://") || starts_with_no_case(*url, "https://"))
    refuse_field(url_param,
                 "remote image URLs are not fetched; send the image inline as a data: URL "
                 "(data:image/png;base64,...)");
  if (!starts_with_no_case(*url, "data:")) refuse_field(url_param, "expected a data: URL (data:image/png;base64,...)");
  return {param, std::move(*url)};
}

}  // namespace duet::server
