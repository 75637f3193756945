#pragma once
// The vision tower of a multimodal checkpoint as a server runs it (docs/vision.md 3): its config, its weights bound by
// name from the checkpoint's own files (kept mapped), and one image's forward: on the host in fp32, or, once
// use_device() is called (a model on the GPU), on the GPU (model/cuda/device_vision_tower.h). It is loaded beside the
// language model (model.h), which only ever sees the rows it makes (Piece::image_rows).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "model/vision_config.h"
#include "model/vision_positions.h"
#include "model/vision_run.h"
#include "model/vision_weights.h"

namespace duet::model {

namespace cuda {
class DeviceVisionTower;
}

class VisionModel {
 public:
  // Reads the config and binds `model.visual.*` by name and shape; refuses (duet::Error) a missing or misshaped
  // tensor by name, and a config whose out_hidden_size is not `text_hidden_size`.
  static std::unique_ptr<VisionModel> load(const std::string& model_dir, int64_t text_hidden_size);
  // Binds the tower's tensors from `checkpoint` (load() reads both from a folder).
  VisionModel(VisionConfig config, checkpoint::Checkpoint checkpoint);
  ~VisionModel();
  VisionModel(const VisionModel&) = delete;
  VisionModel& operator=(const VisionModel&) = delete;

  // From now on rows() runs on the GPU for images of up to `max_patches` patches (its scratch is sized for them; a
  // larger image still runs on the host). Refuses (duet::Error, by name) a build without CUDA and weights or sizes
  // the device tower cannot take. Call it before serving: it is not synchronised with rows().
  void use_device(int64_t max_patches);
  bool on_device() const { return device_ != nullptr; }
  size_t device_bytes() const;  // its weights and scratch on the GPU; 0 on the host
  // The largest image a server lets through (its processor's max_pixels, in patches): what the memory plan sizes the
  // tower's workspace for. use_device() sets it too.
  void set_max_patches(int64_t max_patches) { max_patches_ = max_patches; }
  int64_t max_patches() const { return max_patches_; }
  // What the memory plan counts for it (engine/memory_plan.h): on the GPU, device_bytes(); on the host, its weights
  // and one image's activations at max_patches() (the residual stream, a LayerNorm's output, q/k/v, the attention's
  // output and the MLP's hidden rows, fp32).
  size_t plan_bytes() const;

  const VisionConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // pixel_values values per patch row (channels x temporal patch x patch x patch).
  int64_t patch_row_size() const { return config_.patch_row_size(); }

  // One image's rows, [grid.patches() / merge^2, out_hidden_size], one per image token in block raster order. Depends
  // on this image alone (vision_tower.h). Thread-safe (the host tower reads only; the device tower runs one image at a
  // time); throws duet::Error on a grid it cannot take.
  std::vector<float> rows(std::span<const float> pixel_values, const VisionGrid& grid) const;
  // The same image a stage at a time (model/vision_run.h), where rows() would run it, the same bits. `pixel_values`
  // must stay valid until the first stage has run, and this model for the run's life. A GPU run holds the device tower
  // until it is destroyed (rows() and start() on other threads wait): create, run and destroy it on one thread.
  std::unique_ptr<VisionRun> start(std::span<const float> pixel_values, const VisionGrid& grid) const;

 private:
  VisionConfig config_;
  checkpoint::Checkpoint checkpoint_;  // the mapped files the weights point into
  VisionWeights weights_;
  size_t weight_bytes_ = 0;
  std::unique_ptr<cuda::DeviceVisionTower> device_;  // set by use_device()
  int64_t max_patches_ = 0;
};

// Whether a model on a GPU runs its vision tower there (VisionModel::use_device): yes unless DUET_DEVICE_VISION=0 (then
// on the host, as before: the comparison a benchmark makes).
bool device_vision_wanted();

}  // namespace duet::model
