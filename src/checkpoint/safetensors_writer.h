#pragma once
// Writes safetensors files: the debug dump (DUET_DUMP), tests that build small checkpoints, and the tools that stream
// a checkpoint tensor by tensor (duet adapter, duet convert-norms).
#include <cstdint>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/dtype.h"

namespace duet::checkpoint {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // exactly shape * dtype_size bytes
};

// Tensors are laid out in the order given, each aligned to 8 bytes; throws duet::Error naming the path.
void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file written one tensor at a time, so a tool holds one tensor in memory: the header (every tensor's name,
// dtype and shape; their bytes are not read) goes out first, then each tensor's bytes, in the layout's order.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(std::string path, std::vector<TensorToWrite> layout,
                          const std::map<std::string, std::string>& metadata = {});
  // The next tensor's bytes (exactly its size); refuses naming the tensor otherwise.
  void write_next(std::span<const uint8_t> bytes);
  // Checks every tensor was written and flushes; throws naming the path when the disk refused.
  void finish();
  const std::string& path() const { return path_; }
  const TensorToWrite& next_tensor() const { return layout_.at(next_); }
  uint64_t data_bytes() const { return data_bytes_; }  // the data section, padding included

 private:
  std::string path_;
  std::vector<TensorToWrite> layout_;
  std::vector<uint64_t> starts_;
  uint64_t data_bytes_ = 0;
  uint64_t written_ = 0;
  size_t next_ = 0;
  std::ofstream out_;
};

template <typename T>
std::span<const uint8_t> as_bytes_of(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

}  // namespace duet::checkpoint
