#include "convert/norm_conversion.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>

#include "base/bf16.h"
#include "base/error.h"
#include "checkpoint/json_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"

namespace duet::convert {

namespace fs = std::filesystem;
using checkpoint::DType;
using checkpoint::SafetensorsFile;
using checkpoint::TensorView;

namespace {

constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";

bool is_norm(const TensorView& t) { return t.dtype == DType::f32 && is_gdn_norm_name(t.name); }

// The shards: the index's files, or the one model.safetensors.
std::vector<std::string> shard_names(const fs::path& src) {
  if (fs::exists(src / kIndexFile)) {
    const nlohmann::json index = checkpoint::read_json_file((src / kIndexFile).string());
    std::vector<std::string> names;
    for (const auto& [tensor, file] : index.at("weight_map").items()) names.push_back(file.get<std::string>());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }
  if (fs::exists(src / kSingleFile)) return {std::string(kSingleFile)};
  fail("{}: neither {} nor {}: not a checkpoint folder", src.string(), kIndexFile, kSingleFile);
}

// A shard written anew in its own tensor order, norms as BF16, every other tensor's bytes as they are.
void rewrite_shard(const SafetensorsFile& shard, const fs::path& to, NormConversionReport& report) {
  std::vector<const TensorView*> order;
  for (const TensorView& t : shard.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorView* a, const TensorView* b) { return a->bytes.data() < b->bytes.data(); });
  std::vector<checkpoint::TensorToWrite> layout;
  for (const TensorView* t : order) layout.push_back({t->name, is_norm(*t) ? DType::bf16 : t->dtype, t->shape, {}});
  std::map<std::string, std::string> metadata(shard.metadata().begin(), shard.metadata().end());
  checkpoint::SafetensorsStreamWriter writer(to.string(), layout, metadata);
  for (const TensorView* t : order) {
    if (!is_norm(*t)) {
      writer.write_next(t->bytes);
      continue;
    }
    const auto n = static_cast<size_t>(t->element_count());
    std::vector<uint16_t> rounded(n);
    for (size_t i = 0; i < n; ++i) rounded[i] = float_to_bf16(t->data<float>()[i]);
    writer.write_next(checkpoint::as_bytes_of(rounded));
    report.converted.push_back(t->name);
  }
  writer.finish();
}

void link_or_copy(const fs::path& from, const fs::path& to, NormConversionReport& report) {
  std::error_code error;
  fs::create_hard_link(from, to, error);
  if (!error) {
    report.linked.push_back(to.filename().string());
    return;
  }
  fs::copy_file(from, to);
  report.copied.push_back(to.filename().string());
}

}  // namespace

bool is_gdn_norm_name(std::string_view name) {
  constexpr std::string_view suffix = ".linear_attn.norm.weight";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

NormConversionReport convert_norms(const std::string& src_dir, const std::string& out_dir,
                                   const std::function<void(const std::string&)>& progress) {
  const fs::path src(src_dir), out(out_dir);
  if (!fs::is_directory(src)) fail("{}: not a checkpoint folder", src_dir);
  if (fs::exists(out)) fail("{}: exists; convert-norms writes a new folder", out_dir);

  // Everything is opened and checked before OUT is made.
  std::map<std::string, std::unique_ptr<SafetensorsFile>> shards;
  int64_t norms = 0, total_size = 0, saved = 0;
  for (const std::string& name : shard_names(src)) {
    auto shard = std::make_unique<SafetensorsFile>((src / name).string());
    for (const TensorView& t : shard->tensors()) {
      if (is_norm(t)) ++norms, saved += static_cast<int64_t>(t.bytes.size()) / 2;
      total_size += static_cast<int64_t>(t.bytes.size()) / (is_norm(t) ? 2 : 1);
    }
    shards[name] = std::move(shard);
  }
  if (norms == 0)
    fail(
        "{}: has no F32 linear_attn.norm.weight tensor: nothing to convert (its GDN norms are BF16 already, or it "
        "has no GDN layers)",
        src_dir);

  NormConversionReport report;
  report.total_size = total_size;
  fs::create_directories(out);
  for (const auto& entry : fs::directory_iterator(src)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == kIndexFile) continue;
    const auto shard = shards.find(name);
    const bool has_norm =
        shard != shards.end() && std::any_of(shard->second->tensors().begin(), shard->second->tensors().end(),
                                             [](const TensorView& t) { return is_norm(t); });
    if (has_norm) {
      progress(fmt::format("rewriting {}", name));
      rewrite_shard(*shard->second, out / name, report);
      report.rewritten.push_back(name);
    } else {
      link_or_copy(entry.path(), out / name, report);
    }
  }
  if (fs::exists(src / kIndexFile)) {
    std::ifstream in(src / kIndexFile);
    nlohmann::ordered_json index = nlohmann::ordered_json::parse(in);
    // Whatever the publisher counted (transformers writes parameters x 2), the conversion saved 2 bytes a value.
    if (index.contains("metadata") && index["metadata"].contains("total_size")) {
      report.total_size = index["metadata"]["total_size"].get<int64_t>() - saved;
      index["metadata"]["total_size"] = report.total_size;
    }
    std::ofstream index_out(out / kIndexFile);
    index_out << index.dump(2) << "\n";
    if (!index_out) fail("{}: cannot write", (out / kIndexFile).string());
    report.rewritten.push_back(std::string(kIndexFile));
  }
  return report;
}

}  // namespace duet::convert
