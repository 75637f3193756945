#include "model/vision_model.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "base/error.h"
#include "base/log.h"
#include "model/vision_tower.h"
#include "model/weight_binder.h"
#if DUET_HAVE_CUDA
#include "model/cuda/device_vision_tower.h"
#endif

namespace duet::model {

#if !DUET_HAVE_CUDA
namespace cuda {
class DeviceVisionTower {};  // this build has no CUDA backend: the tower always runs on the host
}  // namespace cuda
#endif

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

VisionModel::~VisionModel() = default;

bool device_vision_wanted() {
  const char* value = std::getenv("DUET_DEVICE_VISION");
  return value == nullptr || std::string_view(value) != "0";
}

void VisionModel::use_device(int64_t max_patches) {
  max_patches_ = max_patches;
#if DUET_HAVE_CUDA
  device_ = std::make_unique<cuda::DeviceVisionTower>(config_, weights_, max_patches);
  log_info(
      "vision tower: on the GPU, {:.1f} MB of weights (BF16 linear layers, the rest fp32) + {:.1f} MB of scratch "
      "for images of up to {} patches",
      static_cast<double>(device_->weight_bytes()) / 1e6, static_cast<double>(device_->scratch_bytes()) / 1e6,
      max_patches);
#else
  (void)max_patches;
  fail("vision tower: this build has no CUDA backend to run it on");
#endif
}

size_t VisionModel::device_bytes() const {
#if DUET_HAVE_CUDA
  if (device_) return device_->weight_bytes() + device_->scratch_bytes();
#endif
  return 0;
}

size_t VisionModel::plan_bytes() const {
  if (on_device()) return device_bytes();
  const int64_t h = config_.hidden_size, f = config_.intermediate_size;
  return weight_bytes_ + static_cast<size_t>(max_patches_) * static_cast<size_t>(6 * h + f) * sizeof(float);
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

std::unique_ptr<VisionRun> VisionModel::start(std::span<const float> pixel_values, const VisionGrid& grid) const {
  check_vision_grid(config_, grid);
  const auto expected = static_cast<size_t>(grid.patches() * patch_row_size());
  if (pixel_values.size() != expected)
    fail("vision tower: {} pixel values for a {} x {} x {} grid, expected {}", pixel_values.size(), grid.t, grid.h,
         grid.w, expected);
#if DUET_HAVE_CUDA
  if (device_ && grid.patches() <= device_->max_patches()) return device_->start(pixel_values.data(), grid);
#endif
  VisionPatchPlaces places;
  places.table = patch_positions(grid, config_.spatial_merge_size);
  places.rotary = places.table;
  return std::make_unique<HostVisionRun>(config_, weights_, pixel_values.data(), grid, std::move(places));
}

std::vector<float> VisionModel::rows(std::span<const float> pixel_values, const VisionGrid& grid) const {
  std::unique_ptr<VisionRun> run = start(pixel_values, grid);
  while (!run->done()) run->run_stage();
  return run->take_rows();
}

}  // namespace duet::model
