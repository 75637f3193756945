#pragma once
// The vision tower's forward on the CPU in fp32 (docs/vision.md 3), one image at a time: pixel_values
// [t*h*w, C*T*P*P] and its grid in, the image's embeddings [t*h*w / 4, out_hidden_size] out, one row per
// <|image_pad|> token in block raster order. Every reduction runs in a fixed order over the image's own rows, so an
// image's output depends only on that image.
//
//   x = pixel_values · patch_embed^T + b                      [N, hidden]   (the Conv3d, kernel = stride)
//   x += interpolate(pos_embed, grid)[patch order]           [N, hidden]
//   depth times:
//     x += proj(attention(rope2d(qkv(LayerNorm1(x)))))        heads of head_dim, per frame, non-causal
//     x += fc2(gelu_tanh(fc1(LayerNorm2(x))))
//   y = LayerNorm(x).view(N / 4, 4 * hidden)                  the 2x2 merge groups
//   out = fc2(gelu_erf(fc1(y)))                               [N / 4, out_hidden_size]
#include <vector>

#include "model/vision_config.h"
#include "model/vision_positions.h"
#include "model/vision_run.h"
#include "model/vision_weights.h"

namespace duet::model {

// Intermediates a test or a dump compares with transformers' (tools/make_vision_fixtures.py's tower.* tensors).
struct VisionTrace {
  std::vector<float> patch_embed;  // [N, hidden] before the positions
  std::vector<float> pos_added;    // [N, hidden] the input of block 0
};

// Where the forward rounds. none: nowhere, fp32 throughout (transformers FP32's arithmetic). linear_inputs_bf16: the
// input of every linear layer (the pixel values, the LayerNorms' outputs, the attention's output, the GELUs' outputs)
// rounded to BF16, nearest even, and nothing else: exactly where the device tower (model/cuda/device_vision_tower.h)
// rounds to feed its BF16 GEMMs, so tests measure the GPU against this as BF16's yardstick.
enum class VisionRounding { none, linear_inputs_bf16 };

// Where each patch is for the position table and for the rotary angles: both patch_positions(grid) in the forward;
// tests plant other ones (a transposed order, 1-D positions) to show the output depends on them.
struct VisionPatchPlaces {
  std::vector<PatchPosition> table;
  std::vector<PatchPosition> rotary;
};

// One image's forward a stage at a time (model/vision_run.h): the same arithmetic, in the same order, as
// vision_forward_at. `pixel_values` must stay valid until the first stage has run; `config`, `weights` and `trace`
// for the run's life. Throws duet::Error on a grid the config cannot take or places that do not fit it.
class HostVisionRun final : public VisionRun {
 public:
  HostVisionRun(const VisionConfig& config, const VisionWeights& weights, const float* pixel_values,
                const VisionGrid& grid, VisionPatchPlaces places, VisionTrace* trace = nullptr,
                VisionRounding rounding = VisionRounding::none);

 private:
  void run(int32_t stage) override;

  const VisionConfig& config_;
  const VisionWeights& weights_;
  const float* pixel_values_;
  VisionGrid grid_;
  VisionPatchPlaces places_;
  VisionTrace* trace_;
  VisionRounding rounding_;
  VisionRotary rope_;
  std::vector<float> x_;  // [N, hidden] the residual stream between stages
};

// One image. Throws duet::Error on a grid the config cannot take.
std::vector<float> vision_forward(const VisionConfig& config, const VisionWeights& weights, const float* pixel_values,
                                  const VisionGrid& grid, VisionTrace* trace = nullptr,
                                  VisionRounding rounding = VisionRounding::none);

// The same with the patch places given (vision_forward passes patch_positions(grid) for both).
std::vector<float> vision_forward_at(const VisionConfig& config, const VisionWeights& weights,
                                     const float* pixel_values, const VisionGrid& grid, const VisionPatchPlaces& places,
                                     VisionTrace* trace = nullptr, VisionRounding rounding = VisionRounding::none);

}  // namespace duet::model
