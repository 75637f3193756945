#include "convert/adapter_extraction.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/bf16.h"
#include "base/error.h"
#include "base/sha256.h"
#include "checkpoint/adapter_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/tensor_values.h"
#include "model/qwen35_config.h"

namespace duet::convert {

namespace fs = std::filesystem;
namespace format = checkpoint::adapter_format;
using checkpoint::DType;
using checkpoint::TensorView;
using Clock = std::chrono::steady_clock;

namespace {

// "model.language_model." (multimodal layout) or "model." (text-only), as the model binds them.
std::string text_prefix(const checkpoint::Checkpoint& c) {
  if (c.contains("model.language_model.embed_tokens.weight")) return "model.language_model.";
  if (c.contains("model.embed_tokens.weight")) return "model.";
  fail("{}: neither model.language_model.embed_tokens.weight nor model.embed_tokens.weight: not a Qwen3.5 checkpoint",
       c.source());
}

// The text model's tensors by their name under the prefix (lm_head.weight as it is); vision and MTP are not ours.
std::map<std::string, const TensorView*> text_tensors(const checkpoint::Checkpoint& c) {
  const std::string prefix = text_prefix(c);
  std::map<std::string, const TensorView*> out;
  for (const std::string& name : c.names()) {
    if (name == "lm_head.weight")
      out[name] = c.find(name);
    else if (name.rfind(prefix, 0) == 0 && name.rfind("model.visual.", 0) != 0)
      out[name.substr(prefix.size())] = c.find(name);
  }
  return out;
}

// The modules the adapter may cover in layer `layer`, by the config's layer type.
bool adaptable(const model::Qwen35Config& config, const std::string& relative, int64_t& layer, std::string& module) {
  static const std::regex pattern(R"(layers\.(\d+)\.(.+)\.weight)");
  std::smatch m;
  if (!std::regex_match(relative, m, pattern)) return false;
  layer = std::stoll(m[1].str());
  module = m[2].str();
  if (layer >= config.num_hidden_layers) return false;
  const bool gdn = config.layer_types[static_cast<size_t>(layer)] == model::LayerType::linear_attention;
  auto listed = [&](const auto& modules) {
    for (std::string_view name : modules)
      if (name == module) return true;
    return false;
  };
  return listed(format::kMlpModules) || (gdn ? listed(format::kGdnModules) : listed(format::kAttentionModules));
}

// True when `merged` holds exactly the BF16 rounding of the F32 `base`, value by value (NaN for NaN).
bool rounding_only(const TensorView& base, const TensorView& merged) {
  if (base.dtype != DType::f32) return false;
  const std::vector<float> b = values_of(base), m = values_of(merged);
  for (size_t i = 0; i < b.size(); ++i) {
    const float rounded = round_to_bf16(b[i]);
    if (std::isnan(rounded) ? !std::isnan(m[i]) : m[i] != rounded) return false;
  }
  return true;
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.bytes.size() == b.bytes.size() &&
         std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

struct Plan {
  struct Module {
    std::string key;
    const TensorView* base;
    const TensorView* merged;
    int64_t out, in, rank;
  };
  std::vector<Module> modules;
  std::vector<std::string> rounding_only;
  int64_t equal = 0;
};

// Every tensor compared and classified before anything is written; refuses what no adapter could carry.
Plan plan_extraction(const checkpoint::Checkpoint& base, const checkpoint::Checkpoint& merged,
                     const model::Qwen35Config& config, int64_t rank) {
  const auto base_tensors = text_tensors(base), merged_tensors = text_tensors(merged);
  for (const auto& [name, t] : merged_tensors)
    if (base_tensors.count(name) == 0)
      fail("{}: {}: the base {} has no such tensor; the merge must have the base's architecture", *t->file, t->name,
           base.folder());
  Plan plan;
  for (const auto& [name, b] : base_tensors) {
    const auto found = merged_tensors.find(name);
    if (found == merged_tensors.end())
      fail("{}: missing tensor {} (the base has it in {})", merged.source(), b->name, *b->file);
    const TensorView* m = found->second;
    if (m->shape != b->shape)
      fail("{}: {}: shape {}, the base's is {}", *m->file, m->name, checkpoint::shape_text(m->shape),
           checkpoint::shape_text(b->shape));
    if (same_bytes(*b, *m)) {
      ++plan.equal;
      continue;
    }
    int64_t layer = 0;
    std::string module;
    if (adaptable(config, name, layer, module)) {
      const int64_t out = b->shape.at(0), in = b->shape.at(1);
      plan.modules.push_back(
          {format::module_key(static_cast<long>(layer), module), b, m, out, in, std::min({rank, out, in})});
    } else if (rounding_only(*b, *m)) {
      plan.rounding_only.push_back(b->name);
    } else {
      fail(
          "{}: {}: differs from the base beyond BF16 rounding, and a runtime adapter covers only the projections "
          "(linear_attn/self_attn/mlp *_proj); serve the merged checkpoint itself",
          *m->file, m->name);
    }
  }
  if (plan.modules.empty())
    fail("{}: no projection differs from the base {}: nothing to adapt", merged.folder(), base.folder());
  return plan;
}

// The gap between neighbouring BF16 values around x: rounding to nearest puts a uniformly placed value within half of
// it, an expected squared error of spacing^2 / 12.
double bf16_spacing(float x) {
  const int exponent = static_cast<int>((std::bit_cast<uint32_t>(x) >> 23) & 0xff);
  return std::ldexp(1.0, std::max(exponent, 1) - 127 - 7);
}

// Factors one module and measures its fit with the factors as stored; returns them as BF16 [A, B].
std::pair<std::vector<uint16_t>, std::vector<uint16_t>> factor_module(const Plan::Module& m, SvdMethod method,
                                                                      ModuleFit& fit) {
  const std::vector<float> base = values_of(*m.base);
  std::vector<float> d = values_of(*m.merged);  // becomes merged - base
  for (size_t i = 0; i < d.size(); ++i) d[i] -= base[i];
  const LowRank factors = factor_low_rank(d, m.out, m.in, m.rank, method);
  std::pair<std::vector<uint16_t>, std::vector<uint16_t>> stored{to_bf16(factors.A), to_bf16(factors.B)};
  std::vector<float> a(factors.A.size()), b(factors.B.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_to_float(stored.first[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_to_float(stored.second[i]);
  std::vector<float> product(d.size());  // B A with the stored factors
  multiply_factors(b, a, m.out, factors.rank, m.in, product.data());
  double difference = 0, residual = 0, floor = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double r = static_cast<double>(d[i]) - product[i];
    difference += static_cast<double>(d[i]) * d[i];
    residual += r * r;
    const double ulp = bf16_spacing(base[i] + d[i]);  // the merged value (BF16 - BF16 is exact in fp32)
    floor += ulp * ulp / 12.0;
  }
  fit.difference = std::sqrt(difference);
  fit.residual = std::sqrt(residual);
  fit.floor = std::sqrt(floor);
  fit.randomized = factors.randomized;
  return stored;
}

std::string config_sha256(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return sha256_hex(text);
}

// A Hugging Face snapshot folder is named by its commit: .../snapshots/<40 hex>.
nlohmann::ordered_json revision_of(const std::string& dir) {
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  const std::string parent = fs::path(dir).lexically_normal().parent_path().filename().string();
  nlohmann::ordered_json r = {{"path", dir}, {"config_sha256", config_sha256(dir)}};
  r["revision"] = parent == "snapshots" && std::regex_match(name, std::regex("[0-9a-f]{40}"))
                      ? nlohmann::ordered_json(name)
                      : nlohmann::ordered_json(nullptr);
  return r;
}

void write_manifest(const ExtractionOptions& options, const ExtractionReport& report) {
  nlohmann::ordered_json manifest = {{"format", format::kFormat},
                                     {"convention", format::kConvention},
                                     {"dtype", "bfloat16"},
                                     {"base", revision_of(options.base_dir)},
                                     {"merged", revision_of(options.merged_dir)},
                                     {"rank", options.rank}};
  nlohmann::ordered_json modules = nlohmann::ordered_json::object();
  for (const ModuleFit& m : report.modules)
    modules[m.key] = {{"shape", {m.out, m.in}},
                      {"rank", m.rank},
                      {"svd", m.randomized ? "randomized" : "full"},
                      {"difference_norm", m.difference},
                      {"residual_norm", m.residual},
                      {"bf16_floor_norm", m.floor}};
  manifest["modules"] = modules;
  nlohmann::ordered_json rounding = nlohmann::ordered_json::object();
  for (const std::string& name : report.rounding_only)
    rounding[name] = "F32 in the base, its BF16 rounding in the merge";
  manifest["not_adapted"] = rounding;
  std::ofstream out(fs::path(options.out_dir) / format::kManifestFile);
  out << manifest.dump(2) << "\n";
  if (!out) fail("{}: cannot write {}", options.out_dir, format::kManifestFile);
}

void prepare_out_dir(const std::string& dir) {
  if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
    fail("--out {}: exists and is not an empty folder; the adapter goes into a new one", dir);
  fs::create_directories(dir);
}

}  // namespace

ExtractionReport extract_adapter(const ExtractionOptions& options) {
  const auto start = Clock::now();
  if (options.rank < 1) fail("--rank {}: must be at least 1", options.rank);
  for (auto file : {format::kHeadWeightsFile, format::kHeadConfigFile})
    if (!fs::exists(fs::path(options.merged_dir) / file))
      fail("--merged {}: has no {}; the adapter folder carries the merged release's joint head", options.merged_dir,
           file);
  const auto base = checkpoint::Checkpoint::open(options.base_dir);
  const auto merged = checkpoint::Checkpoint::open(options.merged_dir);
  const auto config = model::Qwen35Config::load((fs::path(options.base_dir) / "config.json").string());
  const Plan plan = plan_extraction(base, merged, config, options.rank);
  options.progress(fmt::format("{} tensors equal, {} projections to factor (rank {}), {} differ only by BF16 rounding",
                               plan.equal, plan.modules.size(), options.rank, plan.rounding_only.size()));
  prepare_out_dir(options.out_dir);

  std::vector<checkpoint::TensorToWrite> layout;
  for (const Plan::Module& m : plan.modules) {
    layout.push_back({m.key + ".lora_A", DType::bf16, {m.rank, m.in}, {}});
    layout.push_back({m.key + ".lora_B", DType::bf16, {m.out, m.rank}, {}});
  }
  const std::string factors_path = (fs::path(options.out_dir) / format::kFactorsFile).string();
  checkpoint::SafetensorsStreamWriter writer(factors_path, layout, {{"format", "pt"}});
  ExtractionReport report;
  report.rounding_only = plan.rounding_only;
  report.equal_tensors = plan.equal;
  for (size_t i = 0; i < plan.modules.size(); ++i) {
    const Plan::Module& m = plan.modules[i];
    const auto module_start = Clock::now();
    ModuleFit fit{.key = m.key, .out = m.out, .in = m.in, .rank = m.rank};
    const auto [a, b] = factor_module(m, options.svd, fit);
    writer.write_next(checkpoint::as_bytes_of(a));
    writer.write_next(checkpoint::as_bytes_of(b));
    fit.seconds = std::chrono::duration<double>(Clock::now() - module_start).count();
    options.progress(fmt::format(
        "[{}/{}] {} [{}, {}] rank {} ({} SVD): |merged - base| {:.4g}, residual {:.4g} = "
        "{:.3f}x the BF16 floor {:.4g} ({:.2f} s)",
        i + 1, plan.modules.size(), fit.key, fit.out, fit.in, fit.rank, fit.randomized ? "randomized" : "full",
        fit.difference, fit.residual, fit.floor > 0 ? fit.residual / fit.floor : 0.0, fit.floor, fit.seconds));
    report.modules.push_back(fit);
  }
  writer.finish();
  for (const std::string& name : plan.rounding_only)
    options.progress(fmt::format("not adapted: {} (F32 in the base, its BF16 rounding in the merge)", name));

  for (auto file : {format::kHeadWeightsFile, format::kHeadConfigFile})
    fs::copy_file(fs::path(options.merged_dir) / file, fs::path(options.out_dir) / file);
  if (options.lm_head_rows) {
    const TensorView* head = base.find("lm_head.weight");
    if (head == nullptr) head = base.find(text_prefix(base) + "embed_tokens.weight");  // tied
    checkpoint::TensorToWrite rows{std::string(format::kLmHeadRowsTensor), head->dtype, head->shape, head->bytes};
    checkpoint::write_safetensors((fs::path(options.out_dir) / format::kLmHeadRowsFile).string(), {&rows, 1});
  }
  write_manifest(options, report);
  format::sign_folder(options.out_dir);
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace duet::convert
