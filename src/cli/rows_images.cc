#include "cli/rows_images.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/request_validation.h"
#include "image/decode.h"
#include "image/image.h"
#include "image/patches.h"
#include "image/resize.h"
#include "image/smart_resize.h"

namespace duet::cli {

namespace fs = std::filesystem;

std::vector<RowsPrompt> read_rows_prompts(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("--prompts {}: cannot read it", path);
  const nlohmann::json doc = nlohmann::json::parse(file, nullptr, false);
  if (!doc.is_object() || !doc.contains("prompts") || !doc["prompts"].is_array())
    fail("--prompts {}: expected a JSON object {{\"prompts\": [[ids] or {{\"ids\": [...], \"images\": [...]}}, ...]}}",
         path);
  const fs::path folder = fs::path(path).parent_path();
  std::vector<RowsPrompt> prompts;
  for (const auto& entry : doc["prompts"]) {
    const size_t i = prompts.size();
    RowsPrompt prompt;
    const nlohmann::json* ids = &entry;
    if (entry.is_object()) {
      if (!entry.contains("ids")) fail("--prompts {}: prompt {} has no \"ids\"", path, i);
      ids = &entry["ids"];
      if (entry.contains("images")) {
        const auto& images = entry["images"];
        if (!images.is_array()) fail("--prompts {}: prompt {}: \"images\" is not an array of file names", path, i);
        for (const auto& image : images) {
          if (!image.is_string() || image.get<std::string>().empty())
            fail("--prompts {}: prompt {}: \"images\" holds something other than a file name", path, i);
          const fs::path p(image.get<std::string>());
          prompt.images.push_back((p.is_absolute() ? p : folder / p).string());
        }
      }
    }
    if (!ids->is_array() || ids->empty() ||
        !std::all_of(ids->begin(), ids->end(), [](const auto& id) { return id.is_number_integer(); }))
      fail("--prompts {}: prompt {} is not a non-empty array of ids", path, i);
    prompt.ids = ids->get<std::vector<int32_t>>();
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

namespace {

// One image file as the server's preprocess (server/prompt_images.cc) reads an image part's bytes.
engine::PromptImage read_image(const std::string& path, const image::ProcessorConfig& p) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read it", path);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    const image::Image decoded = image::decode(bytes);
    const image::Size size = image::smart_resize(decoded.height, decoded.width, p.factor(), p.min_pixels, p.max_pixels);
    image::Patches patches = image::to_patches(image::resize_bicubic(decoded, size.width, size.height), p.layout);
    return {.pixel_values = std::move(patches.values),
            .t = static_cast<int32_t>(patches.grid_t),
            .h = static_cast<int32_t>(patches.grid_h),
            .w = static_cast<int32_t>(patches.grid_w)};
  } catch (const image::ImageError& error) {
    fail("{}: {}", path, error.what());
  }
}

}  // namespace

std::vector<engine::PromptImage> read_prompt_images(const RowsPrompt& prompt, const image::ProcessorConfig& processor,
                                                    int32_t image_token_id, int64_t patch_row) {
  std::vector<engine::PromptImage> images;
  size_t next = 0;  // the first prompt index after the image before
  for (const std::string& path : prompt.images) {
    engine::PromptImage image = read_image(path, processor);
    while (next < prompt.ids.size() && prompt.ids[next] != image_token_id) ++next;
    image.first_token = static_cast<int32_t>(next);
    next += static_cast<size_t>(int64_t{image.t} * image.h * image.w /
                                (int64_t{processor.layout.merge} * processor.layout.merge));
    images.push_back(std::move(image));
  }
  // The engine's own checks of a request's images: every run of image tokens is one image's, of its grid's size.
  engine::Request request;
  request.prompt = prompt.ids;
  request.images = std::make_shared<const std::vector<engine::PromptImage>>(images);
  engine::RequestLimits limits;
  limits.image_token_id = image_token_id;
  limits.image_merge = static_cast<int32_t>(processor.layout.merge);
  limits.image_patch_row = patch_row;
  try {
    engine::check_prompt_images(request, limits);
  } catch (const engine::RequestInvalid& error) {
    fail("the prompt's image tokens do not fit its images ({}): {}", fmt::join(prompt.images, ", "), error.what());
  }
  return images;
}

std::vector<float> transpose_image_rows(const std::vector<float>& rows, const std::vector<engine::PromptImage>& images,
                                        int64_t hidden, int32_t merge) {
  std::vector<float> out(rows.size());
  int64_t base = 0;  // the image's first row
  for (const engine::PromptImage& image : images) {
    const int64_t frame_rows = image.h / merge, cols = image.w / merge, per_frame = frame_rows * cols;
    for (int64_t frame = 0; frame < image.t; ++frame)
      for (int64_t k = 0; k < per_frame; ++k) {  // token k reads the row at (k % rows, k / rows)
        const int64_t source = base + frame * per_frame + (k % frame_rows) * cols + k / frame_rows;
        const int64_t target = base + frame * per_frame + k;
        std::copy_n(rows.begin() + source * hidden, hidden, out.begin() + target * hidden);
      }
    base += image.t * per_frame;
  }
  if (base * hidden != static_cast<int64_t>(rows.size()))
    fail("transpose_image_rows: {} values for {} image tokens of {}", rows.size(), base, hidden);
  return out;
}

RowsVision RowsVision::load(const std::string& model_dir, const model::Model& model) {
  if (!model.config().has_vision_tower)
    fail("{}: the prompts carry images, but this model has no vision tower (no vision_config in config.json)",
         model_dir);
  if (!model.reads_images())
    fail("{}: the prompts carry images, but this model does not read images on its backend", model_dir);
  RowsVision vision;
  vision.tower = model::VisionModel::load(model_dir, model.config().hidden_size);
  const std::string processor_path = (fs::path(model_dir) / "preprocessor_config.json").string();
  if (!fs::exists(processor_path)) fail("{}: missing; images need the processor's settings", processor_path);
  vision.processor = image::ProcessorConfig::load(processor_path);
  const image::PatchLayout& layout = vision.processor.layout;
  const model::VisionConfig& c = vision.tower->config();
  if (layout.patch != c.patch_size || layout.temporal != c.temporal_patch_size || layout.merge != c.spatial_merge_size)
    fail("{}: patch_size {}, temporal_patch_size {}, merge_size {} are not the vision tower's {}, {}, {}",
         processor_path, layout.patch, layout.temporal, layout.merge, c.patch_size, c.temporal_patch_size,
         c.spatial_merge_size);
  return vision;
}

void RowsVision::use_device_for(const model::Model& model, int64_t max_patches) {
  if (model.device_memory_bytes() != 0 && model::device_vision_wanted() && max_patches > 0)
    tower->use_device(max_patches);
}

std::vector<float> RowsVision::rows(const std::vector<engine::PromptImage>& images) const {
  std::vector<float> all;
  for (const engine::PromptImage& image : images) {
    const std::vector<float> own = tower->rows(image.pixel_values, {image.t, image.h, image.w});
    all.insert(all.end(), own.begin(), own.end());
  }
  return all;
}

}  // namespace duet::cli
