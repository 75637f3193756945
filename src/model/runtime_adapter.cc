#include "model/runtime_adapter.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "base/error.h"
#include "checkpoint/adapter_format.h"
#include "checkpoint/json_file.h"

namespace duet::model {

namespace fs = std::filesystem;
namespace format = checkpoint::adapter_format;
using checkpoint::DType;

std::vector<AdaptableProjection> adaptable_projections(Qwen35LayerWeights& layer) {
  std::vector<AdaptableProjection> out;
  auto add = [&](std::string_view module, const backend::Weight& w, backend::LoraFactors& lora) {
    out.push_back({std::string(module), &w, &lora});
  };
  if (layer.type == LayerType::linear_attention) {
    auto& g = layer.gdn;
    const std::array<std::pair<const backend::Weight*, backend::LoraFactors*>, 5> gdn = {
        {{&g.in_proj_qkv, &g.adapter.in_proj_qkv},
         {&g.in_proj_z, &g.adapter.in_proj_z},
         {&g.in_proj_b, &g.adapter.in_proj_b},
         {&g.in_proj_a, &g.adapter.in_proj_a},
         {&g.out_proj, &g.adapter.out_proj}}};
    for (size_t i = 0; i < gdn.size(); ++i) add(format::kGdnModules[i], *gdn[i].first, *gdn[i].second);
  } else {
    auto& a = layer.attention;
    const std::array<std::pair<const backend::Weight*, backend::LoraFactors*>, 4> attention = {
        {{&a.q_proj, &a.adapter.q_proj},
         {&a.k_proj, &a.adapter.k_proj},
         {&a.v_proj, &a.adapter.v_proj},
         {&a.o_proj, &a.adapter.o_proj}}};
    for (size_t i = 0; i < attention.size(); ++i)
      add(format::kAttentionModules[i], *attention[i].first, *attention[i].second);
  }
  auto& m = layer.mlp;
  const std::array<std::pair<const backend::Weight*, backend::LoraFactors*>, 3> mlp = {
      {{&m.gate_proj, &m.adapter.gate_proj}, {&m.up_proj, &m.adapter.up_proj}, {&m.down_proj, &m.adapter.down_proj}}};
  for (size_t i = 0; i < mlp.size(); ++i) add(format::kMlpModules[i], *mlp[i].first, *mlp[i].second);
  return out;
}

namespace {

backend::Weight view_of(const checkpoint::TensorView& t) {
  backend::Weight w;
  w.type = t.dtype == DType::f32 ? backend::WeightType::f32 : backend::WeightType::bf16;
  w.data = t.bytes.data();
  w.rows = t.shape.at(0);
  w.cols = t.shape.at(1);
  return w;
}

// manifest.json: the format and convention this reader speaks, and {"modules": {key: {"shape": [out, in], "rank"}}}.
std::map<std::string, std::pair<std::vector<int64_t>, int64_t>> read_manifest(const fs::path& path) {
  const nlohmann::json manifest = checkpoint::read_json_file(path.string());
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!manifest.is_object() || !manifest.contains(name)) fail("{}: missing \"{}\"", path.string(), name);
    return manifest.at(name);
  };
  if (field("format") != format::kFormat)
    fail("{}: format {}, expected \"{}\"", path.string(), field("format").dump(), format::kFormat);
  if (field("convention") != format::kConvention)
    fail("{}: convention {}, expected \"{}\"", path.string(), field("convention").dump(), format::kConvention);
  std::map<std::string, std::pair<std::vector<int64_t>, int64_t>> modules;
  const nlohmann::json& listed = field("modules");
  if (!listed.is_object() || listed.empty()) fail("{}: \"modules\" must be a non-empty object", path.string());
  for (const auto& [key, module] : listed.items()) {
    try {
      modules[key] = {module.at("shape").get<std::vector<int64_t>>(), module.at("rank").get<int64_t>()};
    } catch (const nlohmann::json::exception&) {
      fail("{}: module {}: expected {{\"shape\": [out, in], \"rank\": r}}", path.string(), key);
    }
  }
  return modules;
}

// lm_head_rows.safetensors: the output embedding the head was made with must be the one served, byte for byte.
void check_lm_head_rows(const fs::path& path, const backend::Weight& base_head) {
  const checkpoint::Checkpoint rows = checkpoint::Checkpoint::open_file(path.string());
  const DType dtype = base_head.type == backend::WeightType::f32 ? DType::f32 : DType::bf16;
  const checkpoint::TensorView& t = rows.require(format::kLmHeadRowsTensor, {dtype}, {base_head.rows, base_head.cols});
  if (std::memcmp(t.bytes.data(), base_head.data, base_head.bytes()) != 0)
    fail("{}: {}: differs from the served base's output embedding: the adapter was made for another base",
         path.string(), format::kLmHeadRowsTensor);
}

}  // namespace

std::unique_ptr<RuntimeAdapter> RuntimeAdapter::open(const std::string& folder, const Qwen35Weights& base) {
  const fs::path dir(folder);
  if (!fs::is_directory(dir)) fail("--clef {}: not an adapter folder", folder);
  const bool has_rows = fs::exists(dir / format::kLmHeadRowsFile);
  format::verify_checksums(folder, format::signed_files(has_rows));
  auto manifest = read_manifest(dir / format::kManifestFile);
  if (has_rows) check_lm_head_rows(dir / format::kLmHeadRowsFile, base.lm_head);

  std::unique_ptr<RuntimeAdapter> adapter(
      new RuntimeAdapter(folder, checkpoint::Checkpoint::open_file((dir / format::kFactorsFile).string())));
  const checkpoint::Checkpoint& factors = adapter->factors_;
  const std::string& file = factors.source();

  // Every factor must belong to a projection of the base: collect the names the base can take.
  Qwen35Weights shapes = base;
  std::set<std::string> expected;
  for (size_t l = 0; l < shapes.layers.size(); ++l) {
    for (const AdaptableProjection& p : adaptable_projections(shapes.layers[l])) {
      const std::string key = format::module_key(static_cast<long>(l), p.module);
      const checkpoint::TensorView* a = factors.find(key + ".lora_A");
      const checkpoint::TensorView* b = factors.find(key + ".lora_B");
      const auto listed = manifest.find(key);
      if (a == nullptr && b == nullptr) {
        if (listed != manifest.end())
          fail("{}: lists {}, which {} has no factors for", format::kManifestFile, key, file);
        continue;
      }
      if (a == nullptr || b == nullptr)
        fail("{}: {}.{}: missing (its {} is there)", file, key, a == nullptr ? "lora_A" : "lora_B",
             a == nullptr ? "lora_B" : "lora_A");
      const int64_t out = p.weight->rows, in = p.weight->cols;
      if (a->shape.size() != 2 || a->shape[1] != in || a->shape[0] < 1)
        fail("{}: {}.lora_A: {} {}, expected {{ rank, {} }} for the base's [{}, {}] {}", file, key,
             checkpoint::dtype_name(a->dtype), checkpoint::shape_text(a->shape), in, out, in, p.module);
      const int64_t rank = a->shape[0];
      if (rank > std::min(out, in))
        fail("{}: {}.lora_A: rank {} exceeds the full rank {} of the base's [{}, {}] {}", file, key, rank,
             std::min(out, in), out, in, p.module);
      factors.require(key + ".lora_A", {DType::bf16, DType::f32}, {rank, in});
      factors.require(key + ".lora_B", {DType::bf16, DType::f32}, {out, rank});
      if (listed == manifest.end()) fail("{}: {}: factors not listed in {}", file, key, format::kManifestFile);
      if (listed->second.first != std::vector<int64_t>{out, in} || listed->second.second != rank)
        fail("{}: {}: shape {} rank {}, but the factors and the base say {{ {}, {} }} rank {}", format::kManifestFile,
             key, checkpoint::shape_text(listed->second.first), listed->second.second, out, in, rank);
      expected.insert(key + ".lora_A");
      expected.insert(key + ".lora_B");
      adapter->bytes_ += a->bytes.size() + factors.find(key + ".lora_B")->bytes.size();
      adapter->modules_ += 1;
      adapter->max_rank_ = std::max(adapter->max_rank_, rank);
    }
  }
  for (const std::string& name : factors.names())
    if (expected.count(name) == 0)
      fail("{}: {}: not a factor of any projection of the base ({} layers; modules {}.lora_A / .lora_B)", file, name,
           base.layers.size(), format::module_key(0, "linear_attn.in_proj_qkv"));
  for (const auto& [key, module] : manifest)
    if (expected.count(key + ".lora_A") == 0)
      fail("{}: {}: not a projection of the base, or has no factors in {}", format::kManifestFile, key, file);
  if (adapter->modules_ == 0) fail("{}: adapts no projection", file);
  return adapter;
}

void RuntimeAdapter::bind(Qwen35Weights& weights) const {
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    for (const AdaptableProjection& p : adaptable_projections(weights.layers[l])) {
      const std::string key = format::module_key(static_cast<long>(l), p.module);
      const checkpoint::TensorView* a = factors_.find(key + ".lora_A");
      if (a == nullptr) continue;
      p.lora->A = view_of(*a);
      p.lora->B = view_of(*factors_.find(key + ".lora_B"));
    }
  }
}

}  // namespace duet::model
