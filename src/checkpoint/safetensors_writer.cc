#include "checkpoint/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace duet::checkpoint {

namespace {
uint64_t byte_size(const TensorToWrite& t) {
  uint64_t bytes = dtype_size(t.dtype);
  for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
  return bytes;
}
}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::vector<TensorToWrite> layout,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), layout_(std::move(layout)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : layout_) {
    offset = (offset + 7) / 8 * 8;
    starts_.push_back(offset);
    header[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + byte_size(t)}}};
    offset += byte_size(t);
  }
  data_bytes_ = offset;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keeps the data section 8-byte aligned
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("{}: cannot write", path_);
  const uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out_.write(len_bytes, 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void SafetensorsStreamWriter::write_next(std::span<const uint8_t> bytes) {
  if (next_ >= layout_.size()) fail("{}: more tensors written than its header declares", path_);
  const TensorToWrite& t = layout_[next_];
  if (bytes.size() != byte_size(t))
    fail("{}: {}: {} bytes given for {} {}", path_, t.name, bytes.size(), dtype_name(t.dtype), shape_text(t.shape));
  for (; written_ < starts_[next_]; ++written_) out_.put('\0');
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  written_ += bytes.size();
  ++next_;
  if (!out_) fail("{}: write failed at {}", path_, t.name);
}

void SafetensorsStreamWriter::finish() {
  if (next_ != layout_.size())
    fail("{}: {} of {} tensors written (next: {})", path_, next_, layout_.size(), layout_[next_].name);
  out_.flush();
  if (!out_) fail("{}: write failed", path_);
  out_.close();
}

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  for (const auto& t : tensors)
    if (t.bytes.size() != byte_size(t))
      fail("{}: {}: {} bytes given for {} {}", path, t.name, t.bytes.size(), dtype_name(t.dtype), shape_text(t.shape));
  SafetensorsStreamWriter writer(path, {tensors.begin(), tensors.end()}, metadata);
  for (const auto& t : tensors) writer.write_next(t.bytes);
  writer.finish();
}

}  // namespace duet::checkpoint
