#pragma once
// A prompt with images as the engine feeds it to the model (docs/vision.md 4-5): the checks a request's images must
// pass against its prompt, every prompt token's 3-D rotary position and the rope delta of every row after the prompt,
// and, once the vision tower has run, the rows that replace the image tokens' embeddings. A prefill chunk takes the
// slices of its own tokens: its positions, and the rows of the image tokens inside it, so a chunk boundary may cut an
// image anywhere.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/request_validation.h"

namespace duet::engine {

// Throws RequestInvalid "invalid_images" unless the images fit the prompt: an engine that reads images, a generate
// request, grids of positive multiples of the merge, pixel values of the grid's size, runs of image tokens in prompt
// order inside the prompt, and no image token outside them.
void check_prompt_images(const Request& request, const RequestLimits& limits);

class ImagePrompt {
 public:
  // `images` passed check_prompt_images for `prompt`.
  ImagePrompt(std::span<const int32_t> prompt, const std::vector<PromptImage>& images, int32_t image_token_id,
              int32_t merge);

  // Decode rows (and any row after the prompt) rotate at their position plus this (<= 0).
  int32_t rope_delta() const { return delta_; }
  // The prompt's image tokens, in all images.
  int64_t image_tokens() const { return image_tokens_before_.back(); }

  // The images a prompt prefilled from `position` on needs the rows of: the first image with a token at or after
  // `position` and every one after it. An image wholly before it (inside a prefix resumed from the prompt cache) is
  // read from the resumed state, never from rows, so the tower need not run on it.
  size_t first_needed_image(int32_t position) const;

  // The tower's rows of images [first_image, last image], in prompt order: [their image tokens, hidden].
  bool has_rows() const { return has_rows_; }
  void set_rows(std::vector<float> rows, int64_t hidden, size_t first_image = 0);
  void drop_rows() {  // once the prompt is prefilled
    rows_ = {};
    has_rows_ = false;
  }

  // Prompt chunk [start, start + count): its tokens' (time, height, width) positions, [count, 3], and the rows of its
  // image tokens, [image tokens in the chunk, hidden] (needs has_rows() from an image at or before the chunk's first;
  // fails naming the chunk otherwise).
  std::span<const int32_t> positions(int32_t start, int32_t count) const;
  std::span<const float> rows(int32_t start, int32_t count) const;

 private:
  std::vector<int32_t> positions_;            // [prompt, 3]
  std::vector<int64_t> image_tokens_before_;  // [prompt + 1]: image tokens among the first i prompt tokens
  std::vector<int32_t> image_ends_;           // [images]: the prompt index after each image's last token
  std::vector<float> rows_;
  int64_t rows_from_ = 0;  // the image tokens before rows_'s first (those of the images the tower skipped)
  int64_t hidden_ = 0;
  int32_t delta_ = 0;
  bool has_rows_ = false;
};

}  // namespace duet::engine
