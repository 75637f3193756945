#pragma once
// Test helpers: copies of a fixture checkpoint in a temp folder, and surgery on their files (a safetensors header
// rewritten around the same data, a truncated shard, an edited JSON file).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "base/bf16.h"

namespace duet::testing {

namespace fs = std::filesystem;

// A fresh copy of tests/fixtures/models/<name>, removed when the test ends.
class DamagedCopy {
 public:
  explicit DamagedCopy(const std::string& fixture)
      : DamagedCopy(fs::path(tests_dir()) / "fixtures" / "models" / fixture, Folder{}) {}
  // A copy of any model folder (models/demo, say).
  struct Folder {};
  DamagedCopy(const fs::path& source, Folder) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    static int copies = 0;  // several copies in one test get their own folders
    folder_ = fs::temp_directory_path() / (std::string("duet_damaged_") + info->test_suite_name() + "_" + info->name() +
                                           "_" + std::to_string(copies++));
    fs::remove_all(folder_);
    fs::copy(source, folder_);
  }
  ~DamagedCopy() { fs::remove_all(folder_); }
  std::string folder() const { return folder_.string(); }
  std::string file(const std::string& name) const { return (folder_ / name).string(); }

  // Rewrites a safetensors header (JSON) in place, keeping the data section byte for byte.
  void edit_header(const std::string& name, const std::function<void(nlohmann::json&)>& edit) const {
    const std::string bytes = read(file(name));
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[i]);
    auto header = nlohmann::json::parse(bytes.substr(8, len));
    edit(header);
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    write(file(name), out + text + bytes.substr(8 + len));
  }
  // Edits one tensor's stored bytes in place (header unchanged).
  void edit_tensor_bytes(const std::string& name, const std::string& tensor,
                         const std::function<void(char* data, size_t size)>& edit) const {
    std::string bytes = read(file(name));
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[i]);
    const auto header = nlohmann::json::parse(bytes.substr(8, len));
    const uint64_t begin = header[tensor]["data_offsets"][0], end = header[tensor]["data_offsets"][1];
    edit(bytes.data() + 8 + len + begin, end - begin);
    write(file(name), bytes);
  }
  // Rounds every value of an F32 tensor to the nearest BF16 (still stored as F32), in whichever shard holds it.
  void round_f32_tensor_to_bf16(const std::string& tensor) const {
    edit_tensor_bytes(shard_of(tensor), tensor, [](char* data, size_t size) {
      for (size_t i = 0; i + 4 <= size; i += 4) {
        float v;
        std::memcpy(&v, data + i, 4);
        v = round_to_bf16(v);
        std::memcpy(data + i, &v, 4);
      }
    });
  }
  void edit_json(const std::string& name, const std::function<void(nlohmann::json&)>& edit) const {
    auto json = nlohmann::json::parse(read(file(name)));
    edit(json);
    write(file(name), json.dump(2));
  }
  void truncate(const std::string& name, uintmax_t drop_bytes) const {
    fs::resize_file(file(name), fs::file_size(file(name)) - drop_bytes);
  }
  void write_text(const std::string& name, const std::string& text) const { write(file(name), text); }
  // The shard holding `tensor`, from the index (or model.safetensors).
  std::string shard_of(const std::string& tensor) const {
    if (!fs::exists(file("model.safetensors.index.json"))) return "model.safetensors";
    return nlohmann::json::parse(read(file("model.safetensors.index.json")))["weight_map"][tensor];
  }

  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }

 private:
  fs::path folder_;
};

}  // namespace duet::testing
