#pragma once
// Device memory freed with its owner.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace duet::backend::cuda {

// Buffers carved out of one allocation start on 256-byte boundaries, as cudaMalloc's own do.
constexpr size_t kAlign = 256;
constexpr size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct DeviceMemory {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceMemory() = default;
  explicit DeviceMemory(size_t n, const char* what) : bytes(n) {
    if (n) check_cuda(cudaMalloc(&ptr, n), what);
  }
  ~DeviceMemory() {
    if (ptr) cudaFree(ptr);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)), bytes(std::exchange(o.bytes, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
};

}  // namespace duet::backend::cuda
