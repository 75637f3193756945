#include "model/qwen35_model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include "base/bf16.h"
#include "base/error.h"
#include "base/log.h"

namespace duet::model {

namespace {

using Use = backend::Backend::WeightUse;

void place(backend::Backend& be, std::initializer_list<backend::Weight*> weights, Use use) {
  for (backend::Weight* t : weights) *t = be.resident(*t, use);
}
// Projections of one input, stored together (Backend::resident_together).
void place_together(backend::Backend& be, std::initializer_list<backend::Weight*> weights) {
  be.resident_together(std::span<backend::Weight* const>(weights.begin(), weights.size()), Use::projection);
}

// One decoder layer's weights as `be` reads them, its adapter factors included.
void make_resident(Qwen35LayerWeights& layer, backend::Backend& be) {
  place(be, {&layer.input_layernorm, &layer.post_attention_layernorm}, Use::other);
  place_together(be, {&layer.mlp.gate_proj, &layer.mlp.up_proj});
  place(be, {&layer.mlp.down_proj}, Use::projection);
  for (const AdaptableProjection& p : adaptable_projections(layer))
    if (p.lora->present()) {
      place(be, {&p.lora->A}, Use::lora_a);
      place(be, {&p.lora->B}, Use::lora_b);
    }
  if (layer.type == LayerType::linear_attention) {
    backend::GdnWeights& g = layer.gdn;
    place_together(be, {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a});
    place(be, {&g.out_proj}, Use::projection);
    place(be, {&g.conv1d, &g.A_log, &g.dt_bias, &g.norm}, Use::other);
  } else {
    backend::AttentionWeights& a = layer.attention;
    place_together(be, {&a.q_proj, &a.k_proj, &a.v_proj});
    place(be, {&a.o_proj}, Use::projection);
    place(be, {&a.q_norm, &a.k_norm}, Use::other);
  }
}

// The weights as `backend` reads them: each tensor made resident once (a GPU copies it to its memory as stored and
// prepares the GEMM of every projection and of the head).
Qwen35Weights resident_weights(const Qwen35Weights& bound, backend::Backend& be) {
  Qwen35Weights w = bound;
  place(be, {&w.embed_tokens, &w.final_norm}, Use::other);
  place(be, {&w.lm_head}, Use::logits);
  for (Qwen35LayerWeights& layer : w.layers) make_resident(layer, be);
  return w;
}

MtpWeights resident_mtp(const MtpWeights& bound, backend::Backend& be) {
  MtpWeights w = bound;
  place(be, {&w.pre_fc_norm_embedding, &w.pre_fc_norm_hidden, &w.norm}, Use::other);
  place(be, {&w.fc}, Use::projection);
  make_resident(w.layer, be);
  return w;
}

// Logit rows a step's workspace holds without growing: every piece's last row of a full engine step. Steps that
// ask for more (all_logits, in tests and tools) grow it first.
constexpr int64_t kWorkspaceLogitRows = 256;

}  // namespace

Qwen35Model::Qwen35Model(Qwen35Config config, checkpoint::Checkpoint checkpoint,
                         std::unique_ptr<backend::Backend> backend, const std::string& adapter_dir)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      backend_(std::move(backend)),
      gdn_shape_(gdn_shape(config_)),
      attention_shape_(attention_shape(config_)),
      attention_layers_(config_.layer_count(LayerType::full_attention)),
      gdn_layers_(config_.layer_count(LayerType::linear_attention)) {
  // Binding checks every tensor before the backend sees any of them.
  Qwen35Weights bound = bind_qwen35_weights(checkpoint_, config_);
  host_lm_head_ = bound.lm_head;
  if (!adapter_dir.empty()) {
    if (!backend_->applies_adapters())
      fail("--clef {}: the {} backend does not apply runtime adapters yet; serve with --backend cpu, or without --clef",
           adapter_dir, backend_->name());
    adapter_ = RuntimeAdapter::open(adapter_dir, bound);
    adapter_->bind(bound);
    for (Qwen35LayerWeights& layer : bound.layers)
      for (const AdaptableProjection& p : adaptable_projections(layer))
        if (p.lora->present())
          lora_row_elements_ = std::max(lora_row_elements_, p.lora->A.cols + p.lora->A.rows + p.lora->B.rows);
  }
  weights_ = resident_weights(bound, *backend_);
  if (adapter_)
    for (Qwen35LayerWeights& layer : weights_.layers)
      for (const AdaptableProjection& p : adaptable_projections(layer))
        if (p.lora->present()) merged_adapter_bytes_ += backend_->merge_adapter(*p.weight, *p.lora);
  if (auto mtp = bind_mtp_weights(checkpoint_, config_)) mtp_ = resident_mtp(*mtp, *backend_);
}

std::unique_ptr<backend::StateStorage> Qwen35Model::new_mtp_storage(int64_t kv_pages) {
  if (!mtp_) fail("{}: this model has no MTP layer", checkpoint_.source());
  // One attention layer and no GDN state; a single slot, which every MTP piece names (nothing lives in it).
  return backend_->new_state_storage(gdn_shape_, 0, 1, attention_shape_, 1, kv_pages, 0);
}

size_t Qwen35Model::mtp_kv_page_bytes() const { return mtp_ ? backend_->kv_page_bytes(attention_shape_) : 0; }

size_t Qwen35Model::kv_page_bytes() const {
  return static_cast<size_t>(attention_layers_) * backend_->kv_page_bytes(attention_shape_);
}

size_t Qwen35Model::sequence_fixed_bytes() const {
  return static_cast<size_t>(gdn_layers_) * backend_->gdn_state_bytes(gdn_shape_);
}

size_t Qwen35Model::sequence_rewind_bytes(int64_t rows) const {
  return static_cast<size_t>(gdn_layers_) * backend_->gdn_rewind_bytes(gdn_shape_, rows);
}

size_t Qwen35Model::sequence_counts_bytes() const {
  return backend_->penalty_counts_bytes(static_cast<int32_t>(config_.vocab_size));
}

size_t Qwen35Model::sequence_state_bytes(int32_t max_positions) const {
  return sequence_fixed_bytes() + kv_page_bytes() / backend::kKvPagePositions * static_cast<size_t>(max_positions);
}

size_t Qwen35Model::workspace_bytes(int64_t rows) const {
  return step_bytes(rows, std::min(rows, kWorkspaceLogitRows));
}

// Counted at 4 bytes an element (fp32 on the CPU; a GPU's BF16 activations take less): the residual stream, a norm's
// output and a sublayer's output, the largest sublayer's scratch, and per row with logits: the row, its logits and
// twice their size again (a GPU's sampling scratch).
size_t Qwen35Model::step_bytes(int64_t rows, int64_t logit_rows) const {
  const Qwen35Config& c = config_;
  const int64_t value_width = c.linear_num_value_heads * c.linear_value_head_dim;
  // The GDN term includes a GPU's delta-rule chunk scratch: per row and head at most two 64-wide matrix rows and G.
  const int64_t gdn = 2 * gdn_shape_.conv_channels() + 3 * value_width + 2 * c.linear_num_value_heads +
                      (2 * 64 + 1) * c.linear_num_value_heads;
  const int64_t attention = c.num_attention_heads * c.head_dim * 3 + 2 * c.num_key_value_heads * c.head_dim;
  const int64_t mlp = 2 * c.intermediate_size;
  // With a runtime adapter, an adapted row's products need its gathered input, the rank-wide product and the fp32
  // correction beside the sublayer's own scratch (a GPU's adapter path, cuda_backend.cc).
  const int64_t per_row = 3 * c.hidden_size + std::max({gdn, attention, mlp}) + lora_row_elements_;
  return static_cast<size_t>(4 * (rows * per_row + logit_rows * (3 * c.vocab_size + c.hidden_size))) + (1 << 20);
}

void Qwen35Model::reserve_workspace(int64_t rows) { backend_->reserve_workspace(workspace_bytes(rows)); }

std::unique_ptr<backend::StateStorage> Qwen35Model::new_state_storage(int32_t slots, int64_t kv_pages,
                                                                      int64_t snapshots) {
  constexpr int64_t kMaxIds = std::numeric_limits<int32_t>::max();  // slot and page ids are int32
  if (kv_pages < 0 || kv_pages > kMaxIds) fail("state storage: {} KV pages is outside [0, {}]", kv_pages, kMaxIds);
  if (slots < 0) fail("state storage: {} sequence slots is negative", slots);
  if (snapshots < 0 || snapshots > kMaxIds) fail("state storage: {} snapshots is outside [0, {}]", snapshots, kMaxIds);
  return backend_->new_state_storage(gdn_shape_, gdn_layers_, slots, attention_shape_, attention_layers_, kv_pages,
                                     snapshots);
}

std::unique_ptr<Model::Launched> Model::launch(backend::StateStorage& storage, std::span<const Piece> pieces) {
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].carried_from >= 0)
      throw PieceRefused(i, fmt::format("forward: piece {} carries a draw, which this model cannot read", i));
  auto step = std::make_unique<Launched>();
  step->results = forward(storage, pieces);
  return step;
}

std::vector<PieceResult> Model::collect(std::unique_ptr<Launched> step) { return std::move(step->results); }

std::unique_ptr<Model::Launched> Model::launch_holding_masks(backend::StateStorage& storage,
                                                             std::span<const Piece> pieces) {
  (void)storage, (void)pieces;
  fail("this model cannot hold a step's masks for later (Model::masks_later)");
}

void Model::release_masks(Launched& step) {
  (void)step;
  fail("this model cannot hold a step's masks for later (Model::masks_later)");
}

void Model::lm_head_rows(std::span<const int32_t> ids, float* out) const {
  fail("this model cannot gather LM head rows (needed by a decision head)");
}

void Qwen35Model::lm_head_rows(std::span<const int32_t> ids, float* out) const {
  const backend::Weight& head = host_lm_head_;
  for (size_t r = 0; r < ids.size(); ++r) {
    const int32_t id = ids[r];
    if (id < 0 || id >= head.rows) fail("lm_head_rows: token id {} outside the vocabulary [0, {})", id, head.rows);
    float* row = out + r * static_cast<size_t>(head.cols);
    const size_t first = static_cast<size_t>(id) * static_cast<size_t>(head.cols);
    for (int64_t c = 0; c < head.cols; ++c)
      row[c] = head.type == backend::WeightType::f32
                   ? static_cast<const float*>(head.data)[first + c]
                   : bf16_to_float(static_cast<const uint16_t*>(head.data)[first + c]);
  }
}

std::unique_ptr<backend::Backend> make_backend(std::string_view name) {
  if (name == "cpu") return backend::make_cpu_backend();
  if (name == "cuda") return backend::make_cuda_backend();
  if (name == "auto")
    return backend::cuda_backend_available() ? backend::make_cuda_backend() : backend::make_cpu_backend();
  fail("backend `{}`: expected cpu, cuda or auto", name);
}

std::unique_ptr<Model> Model::load(const std::string& model_dir, std::string_view backend_name,
                                   const std::string& adapter_dir) {
  const auto start = std::chrono::steady_clock::now();
  if (!std::filesystem::is_directory(model_dir)) fail("{}: not a model folder", model_dir);
  auto config = Qwen35Config::load((std::filesystem::path(model_dir) / "config.json").string());
  auto checkpoint = checkpoint::Checkpoint::open(model_dir);
  // The constructor binds (and so checks) every tensor before the backend sees any of them.
  auto model =
      std::make_unique<Qwen35Model>(std::move(config), std::move(checkpoint), make_backend(backend_name), adapter_dir);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log_info("loaded {} ({} layers{}, {:.1f} MB of weights) on the {} backend in {:.0f} ms", model_dir,
           model->config().num_hidden_layers, model->has_mtp() ? " and an MTP layer" : "",
           static_cast<double>(model->weight_bytes()) / 1e6, model->backend().name(), ms);
  if (const RuntimeAdapter* adapter = model->adapter())
    log_info("runtime adapter {}: {} modules, rank up to {}, {:.1f} MB of factors (decision passes only){}",
             adapter_dir, adapter->modules(), adapter->max_rank(), static_cast<double>(adapter->bytes()) / 1e6,
             model->merged_adapter_bytes() == 0
                 ? std::string()
                 : fmt::format("; merged into a second copy of its projections for decisions, {:.1f} MB",
                               static_cast<double>(model->merged_adapter_bytes()) / 1e6));
  return model;
}

}  // namespace duet::model
