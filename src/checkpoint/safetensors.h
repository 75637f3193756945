#pragma once
// One safetensors file, memory-mapped: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and [begin, end) byte range in the data section, then the data. The header is checked in full when
// the file is opened, so a tensor view never reaches past the file or overlaps another one.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "checkpoint/dtype.h"

namespace duet::checkpoint {

// A tensor as stored: a view into the mapped file (valid while the SafetensorsFile lives).
struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  const std::string* file = nullptr;  // the path of the file holding it, for messages

  int64_t element_count() const;
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

class SafetensorsFile {
 public:
  // Maps the file and checks its header; throws duet::Error naming the file (and the tensor) on any lie.
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;  // views point into this object: it never moves
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const std::unordered_map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
  std::unordered_map<std::string, std::string> metadata_;
};

}  // namespace duet::checkpoint
