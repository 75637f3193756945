#include "image/processor_config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "image/image.h"

namespace duet::image {

namespace {

using Json = nlohmann::json;

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw ImageError(fmt::format("{}: {}", source, what));
}

// A positive integer at `key`, or `fallback` when absent.
uint64_t positive(const Json& j, const char* key, uint64_t fallback, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    refuse(source, fmt::format("{} must be a positive integer", key));
  return it->get<uint64_t>();
}

// A switch the processor offers that duet implements only one way.
void require(const Json& j, const char* key, const Json& wanted, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null() || *it == wanted) return;
  refuse(source, fmt::format("{} = {} is not supported (duet's image path implements {} only)", key, it->dump(),
                             wanted.dump()));
}

std::array<float, 3> triple(const Json& j, const char* key, std::array<float, 3> fallback, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_array() || it->size() != 3) refuse(source, fmt::format("{} must be a list of 3 numbers", key));
  std::array<float, 3> out{};
  for (size_t c = 0; c < 3; ++c) {
    if (!(*it)[c].is_number()) refuse(source, fmt::format("{} must be a list of 3 numbers", key));
    out[c] = (*it)[c].get<float>();
  }
  return out;
}

}  // namespace

ProcessorConfig ProcessorConfig::parse(const std::string& json_text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    refuse(source, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) refuse(source, "not a JSON object");
  for (const char* key : {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) require(j, key, true, source);
  require(j, "resample", 3, source);  // PIL's BICUBIC
  ProcessorConfig c;
  if (const auto size = j.find("size"); size != j.end() && !size->is_null()) {
    if (!size->is_object()) refuse(source, "size must be an object");
    c.min_pixels = positive(*size, "shortest_edge", c.min_pixels, source);
    c.max_pixels = positive(*size, "longest_edge", c.max_pixels, source);
  }
  c.min_pixels = positive(j, "min_pixels", c.min_pixels, source);  // these override size
  c.max_pixels = positive(j, "max_pixels", c.max_pixels, source);
  if (c.min_pixels > c.max_pixels)
    refuse(source, fmt::format("min pixels {} exceed max pixels {}", c.min_pixels, c.max_pixels));
  c.layout.patch = static_cast<uint32_t>(positive(j, "patch_size", c.layout.patch, source));
  c.layout.temporal = static_cast<uint32_t>(positive(j, "temporal_patch_size", c.layout.temporal, source));
  c.layout.merge = static_cast<uint32_t>(positive(j, "merge_size", c.layout.merge, source));
  if (c.layout.patch > 1024 || c.layout.temporal > 16 || c.layout.merge > 16)
    refuse(source, "patch_size, temporal_patch_size or merge_size is implausibly large");
  c.layout.mean = triple(j, "image_mean", c.layout.mean, source);
  c.layout.std = triple(j, "image_std", c.layout.std, source);
  for (float s : c.layout.std)
    if (!(s > 0)) refuse(source, "image_std must be positive");
  if (const auto it = j.find("rescale_factor"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0)) refuse(source, "rescale_factor must be a positive number");
    c.layout.rescale = it->get<double>();
  }
  return c;
}

ProcessorConfig ProcessorConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) refuse(path, "cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

}  // namespace duet::image
