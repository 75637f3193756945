#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace duet::checkpoint {

int64_t TensorView::element_count() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

namespace {

// The largest header we accept; real ones are a few MB at most, and this keeps a lying length from allocating.
constexpr uint64_t kMaxHeaderBytes = 512ull << 20;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

std::vector<int64_t> parse_shape(const std::string& path, const std::string& name, const nlohmann::json& entry) {
  if (!entry.contains("shape") || !entry["shape"].is_array()) fail("{}: {}: header has no shape array", path, name);
  std::vector<int64_t> shape;
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
      fail("{}: {}: shape entry {} is not a non-negative integer", path, name, d.dump());
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const auto bytes = file_.bytes();
  if (bytes.size() < 8) fail("{}: truncated: {} bytes, shorter than the 8-byte header length", path, bytes.size());
  const uint64_t header_len = read_u64_le(bytes.data());
  if (header_len > kMaxHeaderBytes) fail("{}: header length {} is not believable", path, header_len);
  if (8 + header_len > bytes.size())
    fail("{}: truncated: header says {} bytes, the file has {} after the length", path, header_len, bytes.size() - 8);
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("{}: header is not a JSON object", path);

  const uint8_t* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_object())
        for (const auto& [key, value] : entry.items())
          if (value.is_string()) metadata_[key] = value.get<std::string>();
      continue;
    }
    if (!entry.is_object()) fail("{}: {}: header entry is not an object", path, name);
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail("{}: {}: header has no dtype", path, name);
    const std::string dtype_text = entry["dtype"].get<std::string>();
    const auto dtype = dtype_from_safetensors(dtype_text);
    if (!dtype) fail("{}: {}: unsupported dtype {}", path, name, dtype_text);
    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.shape = parse_shape(path, name, entry);
    const auto& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail("{}: {}: data_offsets must be two non-negative integers", path, name);
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) fail("{}: {}: data_offsets [{}, {}] run backwards", path, name, begin, end);
    if (end > data_size)
      fail("{}: {}: data_offsets [{}, {}] reach past the data section ({} bytes): truncated file or lying header", path,
           name, begin, end, data_size);
    // Sizes are checked in 128-bit-free arithmetic: shape entries are capped at 2^40 and so is the product.
    uint64_t expected = dtype_size(*dtype);
    for (int64_t d : view.shape) {
      if (d != 0 && expected > (uint64_t{1} << 50) / static_cast<uint64_t>(d))
        fail("{}: {}: shape {} is too large", path, name, shape_text(view.shape));
      expected *= static_cast<uint64_t>(d);
    }
    if (end - begin != expected)
      fail("{}: {}: {} {} needs {} bytes, but data_offsets [{}, {}] hold {}", path, name, dtype_name(*dtype),
           shape_text(view.shape), expected, begin, end, end - begin);
    // Weights are read through typed pointers, so each tensor must sit at a multiple of its element size.
    if ((8 + header_len + begin) % dtype_size(*dtype) != 0)
      fail("{}: {}: data at file offset {} is not aligned to its {}-byte elements", path, name, 8 + header_len + begin,
           dtype_size(*dtype));
    view.bytes = std::span<const uint8_t>(data + begin, end - begin);
    tensors_.push_back(std::move(view));
  }

  // No two tensors may share bytes: a header that overlaps them is lying about at least one.
  std::vector<const TensorView*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->bytes.data() < b->bytes.data(); });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* next = by_offset[i];
    if (prev->bytes.empty() || next->bytes.empty()) continue;
    if (next->bytes.data() < prev->bytes.data() + prev->bytes.size())
      fail("{}: {}: data overlaps tensor {}: lying header", path, next->name, prev->name);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].file = &file_.path();
    by_name_.emplace(tensors_[i].name, i);
  }
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace duet::checkpoint
