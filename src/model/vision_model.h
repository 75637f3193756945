#pragma once
// The vision tower of a multimodal checkpoint as a server runs it (docs/vision.md 3): its config, its weights bound by
// name from the checkpoint's own files (kept mapped), and one image's forward on the host in fp32. It is loaded beside
// the language model (model.h), which only ever sees the rows it makes (Piece::image_rows).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "model/vision_config.h"
#include "model/vision_positions.h"
#include "model/vision_weights.h"

namespace duet::model {

class VisionModel {
 public:
  // Reads the config and binds `model.visual.*` by name and shape; refuses (duet::Error) a missing or misshaped
  // tensor by name, and a config whose out_hidden_size is not `text_hidden_size`.
  static std::unique_ptr<VisionModel> load(const std::string& model_dir, int64_t text_hidden_size);
  // Binds the tower's tensors from `checkpoint` (load() reads both from a folder).
  VisionModel(VisionConfig config, checkpoint::Checkpoint checkpoint);

  const VisionConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // pixel_values values per patch row (channels x temporal patch x patch x patch).
  int64_t patch_row_size() const { return config_.patch_row_size(); }

  // One image's rows, [grid.patches() / merge^2, out_hidden_size], one per image token in block raster order. Depends
  // on this image alone (vision_tower.h). Thread-safe (reads only); throws duet::Error on a grid it cannot take.
  std::vector<float> rows(std::span<const float> pixel_values, const VisionGrid& grid) const;

 private:
  VisionConfig config_;
  checkpoint::Checkpoint checkpoint_;  // the mapped files the weights point into
  VisionWeights weights_;
  size_t weight_bytes_ = 0;
};

}  // namespace duet::model
