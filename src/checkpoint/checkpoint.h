#pragma once
// A checkpoint folder: model.safetensors, or the shards named by model.safetensors.index.json. Looks tensors up by
// name and refuses, naming the file and the tensor, anything that is missing or not what the model expects.
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "checkpoint/safetensors.h"

namespace duet::checkpoint {

class Checkpoint {
 public:
  // Opens every shard and checks every header. Throws duet::Error naming the folder, file or tensor.
  static Checkpoint open(const std::string& folder);
  // A single safetensors file (goldens, dumps).
  static Checkpoint open_file(const std::string& path);

  const std::string& folder() const { return folder_; }
  // Where a missing tensor would have been looked for ("model.safetensors.index.json" or the one file).
  const std::string& source() const { return source_; }
  const TensorView* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;

  // The tensor `name`, which must exist with one of `dtypes` and exactly `shape`; otherwise refuses with
  // "file: name: f32 { 128 }, expected bf16 { 128 }".
  const TensorView& require(std::string_view name, std::initializer_list<DType> dtypes,
                            const std::vector<int64_t>& shape) const;

 private:
  std::string folder_;
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string_view, const TensorView*> by_name_;
};

}  // namespace duet::checkpoint
