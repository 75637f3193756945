#include "engine/image_prompt.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "model/mrope.h"

namespace duet::engine {

namespace {
[[noreturn]] void refuse(const std::string& message) { throw RequestInvalid(message, "invalid_images"); }

// Grids far past any context: a side of 2^15 patches is a 524,288-pixel side.
constexpr int64_t kMaxGridSide = int64_t{1} << 15;
}  // namespace

void check_prompt_images(const Request& request, const RequestLimits& limits) {
  if (!request.images || request.images->empty()) return;
  if (limits.image_merge <= 0 || limits.image_token_id < 0)
    refuse("this engine has no vision tower: a prompt with images cannot be read");
  if (request.kind != RequestKind::generate) refuse("decisions read text only: a decide request carries images");
  const int64_t merge = limits.image_merge;
  const std::span<const int32_t> prompt(request.prompt);
  int64_t next_free = 0, tokens_in_runs = 0;
  for (size_t i = 0; i < request.images->size(); ++i) {
    const PromptImage& image = (*request.images)[i];
    if (image.t < 1 || image.h < merge || image.w < merge || image.h % merge != 0 || image.w % merge != 0 ||
        image.t > kMaxGridSide || image.h > kMaxGridSide || image.w > kMaxGridSide)
      refuse(fmt::format("image {}: grid {} x {} x {} is not positive multiples of the merge {}", i, image.t, image.h,
                         image.w, merge));
    const int64_t patches = int64_t{image.t} * image.h * image.w;
    if (image.pixel_values.size() != static_cast<size_t>(patches * limits.image_patch_row))
      refuse(fmt::format("image {}: {} pixel values, its grid needs {} patches of {}", i, image.pixel_values.size(),
                         patches, limits.image_patch_row));
    const int64_t tokens = patches / (merge * merge), first = image.first_token;
    if (first < next_free || first + tokens > static_cast<int64_t>(prompt.size()))
      refuse(
          fmt::format("image {}: its {} tokens from prompt index {} overlap the image before or leave the prompt "
                      "of {} tokens",
                      i, tokens, first, prompt.size()));
    const auto run = prompt.subspan(static_cast<size_t>(first), static_cast<size_t>(tokens));
    if (std::any_of(run.begin(), run.end(), [&](int32_t id) { return id != limits.image_token_id; }))
      refuse(fmt::format("image {}: prompt indices {} to {} are not all the image token {}", i, first,
                         first + tokens - 1, limits.image_token_id));
    next_free = first + tokens;
    tokens_in_runs += tokens;
  }
  const auto in_prompt = std::count(prompt.begin(), prompt.end(), limits.image_token_id);
  if (in_prompt != tokens_in_runs)
    refuse(fmt::format("the prompt holds {} image tokens (id {}), its images {}", in_prompt, limits.image_token_id,
                       tokens_in_runs));
}

ImagePrompt::ImagePrompt(std::span<const int32_t> prompt, const std::vector<PromptImage>& images,
                         int32_t image_token_id, int32_t merge) {
  std::vector<model::ImageRun> runs;
  for (const PromptImage& image : images) {
    runs.push_back({.first = image.first_token, .t = image.t, .h = image.h, .w = image.w});
    image_ends_.push_back(
        static_cast<int32_t>(image.first_token + int64_t{image.t} * image.h * image.w / (int64_t{merge} * merge)));
  }
  const model::RopePositions p = model::mrope_positions(static_cast<int32_t>(prompt.size()), runs, merge);
  positions_.reserve(3 * prompt.size());
  for (size_t t = 0; t < prompt.size(); ++t) positions_.insert(positions_.end(), {p.time[t], p.height[t], p.width[t]});
  delta_ = p.delta;
  image_tokens_before_.assign(prompt.size() + 1, 0);
  for (size_t t = 0; t < prompt.size(); ++t)
    image_tokens_before_[t + 1] = image_tokens_before_[t] + (prompt[t] == image_token_id ? 1 : 0);
}

size_t ImagePrompt::first_needed_image(int32_t position) const {
  return static_cast<size_t>(std::upper_bound(image_ends_.begin(), image_ends_.end(), position) - image_ends_.begin());
}

void ImagePrompt::set_rows(std::vector<float> rows, int64_t hidden, size_t first_image) {
  if (first_image > image_ends_.size())
    fail("engine: rows from image {} of a prompt with {} images", first_image, image_ends_.size());
  const int64_t from = first_image == 0 ? 0 : image_tokens_before_[static_cast<size_t>(image_ends_[first_image - 1])];
  if (rows.size() != static_cast<size_t>((image_tokens() - from) * hidden))
    fail("engine: the vision tower gave {} values for {} image tokens of {}", rows.size(), image_tokens() - from,
         hidden);
  rows_ = std::move(rows);
  rows_from_ = from;
  hidden_ = hidden;
  has_rows_ = true;
}

std::span<const int32_t> ImagePrompt::positions(int32_t start, int32_t count) const {
  return std::span(positions_).subspan(3 * static_cast<size_t>(start), 3 * static_cast<size_t>(count));
}

std::span<const float> ImagePrompt::rows(int32_t start, int32_t count) const {
  const int64_t first = image_tokens_before_[static_cast<size_t>(start)];
  const int64_t last = image_tokens_before_[static_cast<size_t>(start + count)];
  if (first == last) return {};
  if (!has_rows_ || first < rows_from_)
    fail("engine: prompt chunk {} to {} holds image tokens whose rows the vision tower did not give", start,
         start + count);
  return std::span(rows_).subspan(static_cast<size_t>((first - rows_from_) * hidden_),
                                  static_cast<size_t>((last - first) * hidden_));
}

}  // namespace duet::engine
