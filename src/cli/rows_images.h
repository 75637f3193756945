#pragma once
// Prompts with images for `duet rows` (rows_command.cc): the prompts file's entries, and each image read the way
// `duet serve` reads an image part (src/image with the checkpoint's preprocessor_config.json: decode, smart_resize,
// resize, patches; then the vision tower), so a fidelity gate compares transformers' rows of a prompt with images
// (tools/vision_gate_9b.py) with what duet computes from the same ids and the same image files.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/image_prompt.h"
#include "engine/request.h"
#include "image/processor_config.h"
#include "model/model.h"
#include "model/vision_model.h"

namespace duet::cli {

// One entry of the prompts file: an array of ids, or {"ids": [...], "images": ["file", ...]}, whose ids already hold
// each image's run of image tokens (as transformers' processor expands <|image_pad|>), images in prompt order.
struct RowsPrompt {
  std::vector<int32_t> ids;
  std::vector<std::string> images;  // paths; a relative one is read from the prompts file's folder
};

// Throws duet::Error naming the file and the entry when it is neither form.
std::vector<RowsPrompt> read_rows_prompts(const std::string& path);

// The images of `prompt`, decoded and preprocessed as a server does, each placed at the next run of `image_token_id`
// tokens from the end of the image before it. Throws duet::Error naming the file (unreadable, not an image) or the
// prompt (its runs of image tokens do not fit the images' grids: engine::check_prompt_images).
std::vector<engine::PromptImage> read_prompt_images(const RowsPrompt& prompt, const image::ProcessorConfig& processor,
                                                    int32_t image_token_id, int64_t patch_row);

// The rows of `images` in column-major token order, image by image: the right rows in the wrong places (a planted
// control: a gate that cannot tell this from the truth cannot see where an image's rows go).
std::vector<float> transpose_image_rows(const std::vector<float>& rows, const std::vector<engine::PromptImage>& images,
                                        int64_t hidden, int32_t merge);

// The vision tower and the image processor of a checkpoint, for `duet rows`: the tower on the GPU when the model is
// there (sized for the largest image of the prompts), as `duet serve` runs it.
struct RowsVision {
  std::unique_ptr<model::VisionModel> tower;
  image::ProcessorConfig processor;

  // Throws duet::Error naming why images cannot be read (no vision_config, no preprocessor_config.json, a backend that
  // does not apply M-RoPE, patch sizes unlike the tower's).
  static RowsVision load(const std::string& model_dir, const model::Model& model);
  // Moves the tower to the GPU for images of up to `max_patches` when the model runs there (and DUET_DEVICE_VISION
  // is not 0).
  void use_device_for(const model::Model& model, int64_t max_patches);
  // Every image's rows in prompt order, [image tokens, hidden].
  std::vector<float> rows(const std::vector<engine::PromptImage>& images) const;
};

}  // namespace duet::cli
