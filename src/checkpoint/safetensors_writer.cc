#include "checkpoint/safetensors_writer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace duet::checkpoint {

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> starts;
  for (const auto& t : tensors) {
    uint64_t expected = dtype_size(t.dtype);
    for (int64_t d : t.shape) expected *= static_cast<uint64_t>(d);
    if (expected != t.bytes.size())
      fail("{}: {}: {} bytes given for {} {}", path, t.name, t.bytes.size(), dtype_name(t.dtype), shape_text(t.shape));
    offset = (offset + 7) / 8 * 8;
    starts.push_back(offset);
    header[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keeps the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot write", path);
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  uint64_t written = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (; written < starts[i]; ++written) out.put('\0');
    out.write(reinterpret_cast<const char*>(tensors[i].bytes.data()),
              static_cast<std::streamsize>(tensors[i].bytes.size()));
    written += tensors[i].bytes.size();
  }
  if (!out) fail("{}: write failed", path);
}

}  // namespace duet::checkpoint
