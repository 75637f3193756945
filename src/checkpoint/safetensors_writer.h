#pragma once
// Writes a safetensors file: used by the debug dump (DUET_DUMP) and by tests that build small checkpoints.
#include <cstdint>
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

template <typename T>
std::span<const uint8_t> as_bytes_of(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

}  // namespace duet::checkpoint
