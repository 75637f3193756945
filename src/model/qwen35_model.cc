#include "model/qwen35_model.h"

#include <chrono>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"

namespace duet::model {

void Qwen35SequenceState::reset() {
  for (auto& layer : layers_) layer->reset();
  position_ = 0;
}

Qwen35Model::Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint,
                         std::unique_ptr<backend::Backend> backend)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      weights_(bind_qwen35_weights(checkpoint_, config_)),
      backend_(std::move(backend)),
      gdn_shape_(gdn_shape(config_)),
      attention_shape_(attention_shape(config_)) {}

size_t Qwen35Model::sequence_state_bytes(int32_t max_positions) const {
  size_t bytes = 0;
  for (auto type : config_.layer_types)
    bytes += type == LayerType::linear_attention ? backend_->gdn_state_bytes(gdn_shape_)
                                                 : backend_->kv_cache_bytes(attention_shape_, max_positions);
  return bytes;
}

std::unique_ptr<SequenceState> Qwen35Model::new_sequence_state(int32_t max_positions) const {
  if (max_positions <= 0) fail("sequence state: max_positions = {} must be positive", max_positions);
  std::vector<std::unique_ptr<backend::LayerState>> layers;
  for (auto type : config_.layer_types)
    layers.push_back(type == LayerType::linear_attention ? backend_->new_gdn_state(gdn_shape_)
                                                         : backend_->new_kv_cache(attention_shape_, max_positions));
  return std::make_unique<Qwen35SequenceState>(std::move(layers), max_positions);
}

std::unique_ptr<Model> Model::load(const std::string& model_dir) {
  const auto start = std::chrono::steady_clock::now();
  if (!std::filesystem::is_directory(model_dir)) fail("{}: not a model folder", model_dir);
  auto config = Qwen35Config::load((std::filesystem::path(model_dir) / "config.json").string());
  auto checkpoint = checkpoint::Checkpoint::open(model_dir);
  // The constructor binds (and so checks) every tensor before the backend sees any of them.
  auto model = std::make_unique<Qwen35Model>(std::move(config), std::move(checkpoint), backend::make_cpu_backend());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log_info("loaded {} ({} layers, {:.1f} MB of weights) in {:.0f} ms", model_dir, model->config().num_hidden_layers,
           static_cast<double>(model->weight_bytes()) / 1e6, ms);
  return model;
}

}  // namespace duet::model
