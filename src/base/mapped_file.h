#pragma once
// A read-only memory map of a whole file; weights are views into it, never copies.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace duet {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws duet::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace duet
