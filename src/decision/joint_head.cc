// Loading the joint schema head: every tensor checked by name, dtype and shape before anything is built.
#include "decision/joint_head.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "base/bf16.h"
#include "base/error.h"

namespace duet::decision {

namespace fs = std::filesystem;
using checkpoint::DType;

namespace {

constexpr const char* kWeightsFile = "joint_head.safetensors";
constexpr const char* kConfigFile = "joint_head_config.json";

// Binds tensors of the head file by name, checked against the spec's shapes.
class Binder {
 public:
  Binder(const checkpoint::Checkpoint& file, const JointHeadConfig& config) : file_(file) {
    for (auto& [name, shape] : JointHead::tensor_shapes(config)) shapes_.emplace(name, shape);
  }

  const checkpoint::TensorView& tensor(const std::string& name) const {
    auto it = shapes_.find(name);
    if (it == shapes_.end()) fail("joint head: {} is not a tensor of the head", name);  // a bug here, not the file
    return file_.require(name, {DType::bf16, DType::f32}, it->second);
  }
  backend::Weight matrix(const std::string& name) const {
    const checkpoint::TensorView& t = tensor(name);
    return backend::Weight{.type = t.dtype == DType::bf16 ? backend::WeightType::bf16 : backend::WeightType::f32,
                           .data = t.bytes.data(),
                           .rows = t.shape.at(0),
                           .cols = t.shape.size() > 1 ? t.shape[1] : 1};
  }
  std::vector<float> floats(const std::string& name) const {
    const checkpoint::TensorView& t = tensor(name);
    std::vector<float> out(static_cast<size_t>(t.element_count()));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = t.dtype == DType::bf16 ? bf16_to_float(t.data<uint16_t>()[i]) : t.data<float>()[i];
    return out;
  }
  float scalar(const std::string& name) const { return floats(name).at(0); }
  LayerNormWeights norm(const std::string& prefix) const {
    return {floats(prefix + ".weight"), floats(prefix + ".bias")};
  }
  LinearWeights linear(const std::string& prefix, bool bias = true) const {
    return {matrix(prefix + ".weight"), bias ? floats(prefix + ".bias") : std::vector<float>{}};
  }
  // in_proj_weight [3w, w] is q | k | v by rows: three [w, w] views of it, each with its slice of the bias.
  AttentionWeights attention(const std::string& prefix) const {
    const backend::Weight packed = matrix(prefix + ".in_proj_weight");
    const std::vector<float> bias = floats(prefix + ".in_proj_bias");
    const int64_t w = packed.cols;
    const size_t element = packed.type == backend::WeightType::bf16 ? 2 : 4;
    auto part = [&](int64_t k) {
      backend::Weight view = packed;
      view.rows = w;
      view.data = static_cast<const uint8_t*>(packed.data) + static_cast<size_t>(k * w * w) * element;
      return LinearWeights{view, std::vector<float>(bias.begin() + k * w, bias.begin() + (k + 1) * w)};
    };
    return {part(0), part(1), part(2), linear(prefix + ".out_proj")};
  }

 private:
  const checkpoint::Checkpoint& file_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> JointHead::tensor_shapes(const JointHeadConfig& config) {
  const int64_t h = config.hidden_size, w = config.width, f = config.feedforward;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"hidden_norm.weight", {h}}, {"hidden_norm.bias", {h}}, {"type_embedding.weight", {3, w}}};
  for (const char* name : {"memory", "question", "option_question", "global", "option_context", "option_lexical"})
    shapes.push_back({std::string(name) + "_projection.weight", {w, h}});
  auto norm = [&](const std::string& prefix) {
    shapes.push_back({prefix + ".weight", {w}});
    shapes.push_back({prefix + ".bias", {w}});
  };
  auto attention = [&](const std::string& prefix) {
    shapes.push_back({prefix + ".in_proj_weight", {3 * w, w}});
    shapes.push_back({prefix + ".in_proj_bias", {3 * w}});
    shapes.push_back({prefix + ".out_proj.weight", {w, w}});
    shapes.push_back({prefix + ".out_proj.bias", {w}});
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    shapes.push_back({prefix + ".weight", {out, in}});
    shapes.push_back({prefix + ".bias", {out}});
  };
  for (int64_t i = 0; i < config.routing_layers; ++i) {
    const std::string p = "evidence_layers." + std::to_string(i);
    for (const char* n : {".query_norm", ".memory_norm", ".feedforward_norm"}) norm(p + n);
    attention(p + ".attention");
    linear(p + ".feedforward.0", f, w);
    linear(p + ".feedforward.3", w, f);
  }
  norm("option_summary_norm");
  for (int64_t j = 0; j < config.layers; ++j) {
    const std::string p = "layers." + std::to_string(j);
    attention(p + ".self_attn");
    attention(p + ".multihead_attn");
    linear(p + ".linear1", f, w);
    linear(p + ".linear2", w, f);
    for (const char* n : {".norm1", ".norm2", ".norm3"}) norm(p + n);
  }
  norm("field_norm");
  norm("option_norm");
  linear("residual_scorer.0", w, 4 * w);
  linear("residual_scorer.3", 1, w);
  for (const char* name : {"prior_logit_scale", "joint_logit_scale", "residual_gate"}) shapes.push_back({name, {}});
  return shapes;
}

size_t JointHead::weight_bytes() const {
  size_t bytes = 0;
  for (const std::string& name : file_.names()) bytes += file_.find(name)->bytes.size();
  return bytes;
}

JointHead::ProductMemory JointHead::product_memory() const {
  ProductMemory memory;
  int64_t widest_in = 0, widest_out = 0;
  for (const auto& [name, shape] : tensor_shapes(config_)) {
    int64_t count = 1;
    for (int64_t n : shape) count *= n;
    memory.weight_bytes += static_cast<size_t>(count) * sizeof(float);   // the device head keeps every tensor
    if (shape.size() != 2 || name == "type_embedding.weight") continue;  // the one matrix that is a lookup
    widest_out = std::max(widest_out, shape[0]);
    widest_in = std::max(widest_in, shape[1]);
  }
  // Host products: a product's rows in and out. The device head (decision/cuda): the memory M, and while the head
  // runs one layer's LayerNorm of it, keys and values (4 w), plus a chunk's rows as they arrive (h).
  const int64_t host_products = widest_in + widest_out;
  const int64_t device_head = 4 * config_.width + config_.hidden_size;
  memory.bytes_per_position = static_cast<size_t>(std::max(host_products, device_head)) * sizeof(float);
  return memory;
}

bool JointHead::present(const std::string& model_dir) {
  const bool weights = fs::exists(fs::path(model_dir) / kWeightsFile);
  const bool config = fs::exists(fs::path(model_dir) / kConfigFile);
  if (weights != config)
    fail("{}: has {} but not {}; a decision model needs both (or neither, for chat only)", model_dir,
         weights ? kWeightsFile : kConfigFile, weights ? kConfigFile : kWeightsFile);
  return weights;
}

std::unique_ptr<JointHead> JointHead::load(const std::string& model_dir, int64_t backbone_hidden) {
  const std::string config_path = (fs::path(model_dir) / kConfigFile).string();
  JointHeadConfig config = JointHeadConfig::load(config_path);
  if (backbone_hidden != 0 && config.hidden_size != backbone_hidden)
    fail("{}: hidden_size {} does not match the backbone's hidden_size {}", config_path, config.hidden_size,
         backbone_hidden);
  auto file = checkpoint::Checkpoint::open_file((fs::path(model_dir) / kWeightsFile).string());
  std::set<std::string> expected;
  for (const auto& [name, shape] : tensor_shapes(config)) expected.insert(name);
  for (const std::string& name : file.names())
    if (!expected.contains(name))
      fail("{}: {}: not a tensor of the joint head as {} describes it", file.source(), name, config_path);
  return std::unique_ptr<JointHead>(new JointHead(config, std::move(file)));
}

JointHead::JointHead(JointHeadConfig config, checkpoint::Checkpoint file) : config_(config), file_(std::move(file)) {
  const Binder bind(file_, config_);
  JointHeadWeights& w = weights_;
  w.hidden_norm = bind.norm("hidden_norm");
  w.memory = bind.linear("memory_projection", false);
  w.question = bind.linear("question_projection", false);
  w.option_question = bind.linear("option_question_projection", false);
  w.global_row = bind.linear("global_projection", false);
  w.option_context = bind.linear("option_context_projection", false);
  w.option_lexical = bind.linear("option_lexical_projection", false);
  w.type_embedding = bind.floats("type_embedding.weight");
  for (int64_t i = 0; i < config_.routing_layers; ++i) {
    const std::string p = "evidence_layers." + std::to_string(i);
    w.evidence_layers.push_back({.query_norm = bind.norm(p + ".query_norm"),
                                 .memory_norm = bind.norm(p + ".memory_norm"),
                                 .feedforward_norm = bind.norm(p + ".feedforward_norm"),
                                 .attention = bind.attention(p + ".attention"),
                                 .feedforward_in = bind.linear(p + ".feedforward.0"),
                                 .feedforward_out = bind.linear(p + ".feedforward.3")});
  }
  w.option_summary_norm = bind.norm("option_summary_norm");
  for (int64_t j = 0; j < config_.layers; ++j) {
    const std::string p = "layers." + std::to_string(j);
    w.layers.push_back({.self_attention = bind.attention(p + ".self_attn"),
                        .cross_attention = bind.attention(p + ".multihead_attn"),
                        .linear1 = bind.linear(p + ".linear1"),
                        .linear2 = bind.linear(p + ".linear2"),
                        .norm1 = bind.norm(p + ".norm1"),
                        .norm2 = bind.norm(p + ".norm2"),
                        .norm3 = bind.norm(p + ".norm3")});
  }
  w.field_norm = bind.norm("field_norm");
  w.option_norm = bind.norm("option_norm");
  w.scorer_in = bind.linear("residual_scorer.0");
  w.scorer_out = bind.linear("residual_scorer.3");
  w.prior_logit_scale = bind.scalar("prior_logit_scale");
  w.joint_logit_scale = bind.scalar("joint_logit_scale");
  w.residual_gate = bind.scalar("residual_gate");
}

}  // namespace duet::decision
