#include "model/vision_model.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "model/vision_tower.h"
#include "model/weight_binder.h"

namespace duet::model {

namespace {
std::string config_text(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) fail("{}: cannot read it", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

VisionModel::VisionModel(VisionConfig config, checkpoint::Checkpoint checkpoint)
    : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {
  WeightBinder bind(checkpoint_, weight_bytes_);
  weights_ = bind_vision_weights(bind, config_);
}

std::unique_ptr<VisionModel> VisionModel::load(const std::string& model_dir, int64_t text_hidden_size) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  VisionConfig config = VisionConfig::parse(config_text(model_dir), path);
  if (config.out_hidden_size != text_hidden_size)
    fail("{}: vision_config.out_hidden_size {} is not the language model's hidden_size {}", path,
         config.out_hidden_size, text_hidden_size);
  auto model = std::make_unique<VisionModel>(std::move(config), checkpoint::Checkpoint::open(model_dir));
  log_info("vision tower: {} blocks of {}, {:.1f} MB of weights (cpu, fp32)", model->config_.depth,
           model->config_.hidden_size, static_cast<double>(model->weight_bytes_) / 1e6);
  return model;
}

std::vector<float> VisionModel::rows(std::span<const float> pixel_values, const VisionGrid& grid) const {
  check_vision_grid(config_, grid);
  const auto expected = static_cast<size_t>(grid.patches() * patch_row_size());
  if (pixel_values.size() != expected)
    fail("vision tower: {} pixel values for a {} x {} x {} grid, expected {}", pixel_values.size(), grid.t, grid.h,
         grid.w, expected);
  return vision_forward(config_, weights_, pixel_values.data(), grid);
}

}  // namespace duet::model
