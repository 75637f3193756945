#include "checkpoint/checkpoint.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "checkpoint/json_file.h"

namespace duet::checkpoint {

namespace fs = std::filesystem;

namespace {

// The shard names of an index, checked to be plain file names inside the folder.
std::map<std::string, std::vector<std::string>> shards_of_index(const std::string& index_path,
                                                                const nlohmann::json& index) {
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail("{}: has no weight_map object", index_path);
  std::map<std::string, std::vector<std::string>> tensors_by_shard;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map[{}] is not a file name", index_path, name);
    const auto file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail("{}: weight_map[{}] = \"{}\" is not a file name in the folder", index_path, name, file);
    tensors_by_shard[file].push_back(name);
  }
  if (tensors_by_shard.empty()) fail("{}: weight_map is empty", index_path);
  return tensors_by_shard;
}

std::string dtypes_text(std::initializer_list<DType> dtypes) {
  std::string text;
  for (DType d : dtypes) {
    if (!text.empty()) text += " or ";
    text += dtype_name(d);
  }
  return text;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& folder) {
  Checkpoint checkpoint;
  checkpoint.folder_ = folder;
  const std::string index_path = (fs::path(folder) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(folder) / "model.safetensors").string();
  if (fs::exists(index_path)) {
    checkpoint.source_ = index_path;
    const auto shards = shards_of_index(index_path, read_json_file(index_path));
    for (const auto& [file, names] : shards) {
      const std::string path = (fs::path(folder) / file).string();
      if (!fs::exists(path)) fail("{}: names shard {}, which does not exist", index_path, path);
      auto shard = std::make_unique<SafetensorsFile>(path);
      // The index and the shard must agree: every tensor it places here is here.
      for (const auto& name : names)
        if (shard->find(name) == nullptr) fail("{}: index places {} in this shard, but it is not there", path, name);
      checkpoint.files_.push_back(std::move(shard));
    }
  } else if (fs::exists(single_path)) {
    checkpoint.source_ = single_path;
    checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(single_path));
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", folder);
  }
  for (const auto& file : checkpoint.files_)
    for (const auto& tensor : file->tensors()) {
      auto [it, inserted] = checkpoint.by_name_.emplace(tensor.name, &tensor);
      if (!inserted) fail("{}: {}: also stored in {}", file->path(), tensor.name, *it->second->file);
    }
  return checkpoint;
}

Checkpoint Checkpoint::open_file(const std::string& path) {
  Checkpoint checkpoint;
  checkpoint.folder_ = fs::path(path).parent_path().string();
  checkpoint.source_ = path;
  checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& tensor : checkpoint.files_.back()->tensors()) checkpoint.by_name_.emplace(tensor.name, &tensor);
  return checkpoint;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  for (const auto& file : files_)
    for (const auto& tensor : file->tensors()) names.push_back(tensor.name);
  return names;
}

const TensorView& Checkpoint::require(std::string_view name, std::initializer_list<DType> dtypes,
                                      const std::vector<int64_t>& shape) const {
  const TensorView* tensor = find(name);
  if (tensor == nullptr) fail("{}: missing tensor {}", source_, name);
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || d == tensor->dtype;
  if (!dtype_ok || tensor->shape != shape)
    fail("{}: {}: {} {}, expected {} {}", *tensor->file, name, dtype_name(tensor->dtype), shape_text(tensor->shape),
         dtypes_text(dtypes), shape_text(shape));
  return *tensor;
}

}  // namespace duet::checkpoint
