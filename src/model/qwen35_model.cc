#include "model/qwen35_model.h"

#include <chrono>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"

namespace duet::model {

void Qwen35SequenceState::reset() {
  for (auto& layer : layers_) layer->reset();
  pool_->give_back(*page_table_);
  position_ = 0;
}

Qwen35Model::Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint,
                         std::unique_ptr<backend::Backend> backend)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      weights_(bind_qwen35_weights(checkpoint_, config_)),
      backend_(std::move(backend)),
      gdn_shape_(gdn_shape(config_)),
      attention_shape_(attention_shape(config_)),
      attention_layers_(config_.layer_count(LayerType::full_attention)) {}

size_t Qwen35Model::kv_page_bytes() const {
  return static_cast<size_t>(attention_layers_) * backend_->kv_page_bytes(attention_shape_);
}

size_t Qwen35Model::sequence_fixed_bytes() const {
  return static_cast<size_t>(config_.layer_count(LayerType::linear_attention)) * backend_->gdn_state_bytes(gdn_shape_);
}

size_t Qwen35Model::sequence_state_bytes(int32_t max_positions) const {
  return sequence_fixed_bytes() + kv_page_bytes() / backend::kKvPagePositions * static_cast<size_t>(max_positions);
}

void Qwen35Model::reserve_kv_pages(int64_t pages) {
  kv_pages_ = std::make_shared<KvPagePool>(*backend_, attention_shape_, attention_layers_, pages);
}

std::unique_ptr<SequenceState> Qwen35Model::new_sequence_state(int32_t max_positions) const {
  if (max_positions <= 0) fail("sequence state: max_positions = {} must be positive", max_positions);
  // Without a shared pool the state brings its own, with room for exactly its max_positions (as many pages).
  std::shared_ptr<KvPagePool> pool =
      kv_pages_
          ? kv_pages_
          : std::make_shared<KvPagePool>(*backend_, attention_shape_, attention_layers_, kv_pages_for(max_positions));
  auto page_table = std::make_unique<std::vector<int32_t>>();
  std::vector<std::unique_ptr<backend::LayerState>> layers;
  int64_t attention_layer = 0;
  for (auto type : config_.layer_types)
    layers.push_back(type == LayerType::linear_attention
                         ? backend_->new_gdn_state(gdn_shape_)
                         : backend_->new_kv_cache(pool->storage(), attention_layer++, *page_table));
  return std::make_unique<Qwen35SequenceState>(std::move(layers), std::move(pool), std::move(page_table),
                                               max_positions);
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
