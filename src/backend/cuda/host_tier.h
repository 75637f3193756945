#pragma once
// The prompt cache's host tier on the CUDA backend (backend::HostStateTier): GDN snapshots and KV pages copied out of
// the device storage into one pinned allocation made at start, and back.
//
// Why the step stream: a snapshot or a page the device tier lets go is overwritten by the next step that takes it,
// and a restored one is read by the next step that resumes from it. On the step stream each copy is ordered after the
// step that wrote its source and before the step that reuses it, with no event or host wait (pinned memory keeps the
// copies asynchronous). The engine calls these only between steps, on its thread; a step being captured into a graph
// would swallow the copy into the graph, so a copy asked for during a capture is refused (check_not_capturing).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace duet::backend::cuda {

// Where the device storage keeps what the host tier copies (CudaStateStorage's layout).
struct DeviceStateLayout {
  cudaStream_t stream = nullptr;           // the step stream
  std::byte* conv_snapshots = nullptr;     // [snapshots][conv_bytes]
  std::byte* delta_snapshots = nullptr;    // [snapshots][delta_bytes]
  size_t conv_bytes = 0, delta_bytes = 0;  // one snapshot's conv run and delta-rule run (every GDN layer)
  int64_t snapshots = 0;
  std::byte* kv = nullptr;  // [attention_layers][pages][page_bytes]
  int64_t pages = 0, attention_layers = 0;
  size_t page_bytes = 0;  // K | V of one page of one layer
};

class CudaHostTier final : public HostStateTier {
 public:
  CudaHostTier(const DeviceStateLayout& device, int64_t snapshots, int64_t pages);
  ~CudaHostTier() override;
  CudaHostTier(const CudaHostTier&) = delete;
  CudaHostTier& operator=(const CudaHostTier&) = delete;

  int64_t snapshots() const override { return snapshots_; }
  int64_t pages() const override { return pages_; }
  size_t bytes() const override { return bytes_; }
  void save_snapshot(int32_t snapshot, int32_t host) override;
  void restore_snapshot(int32_t host, int32_t snapshot) override;
  void save_pages(std::span<const int32_t> pages, std::span<const int32_t> host) override;
  void restore_pages(std::span<const int32_t> host, std::span<const int32_t> pages) override;

 private:
  void check_not_capturing(const char* what) const;
  std::byte* host_snapshot(int32_t host) const;
  std::byte* host_page(int32_t host) const;  // [attention_layers][page_bytes]
  std::byte* device_page(int32_t page) const;

  DeviceStateLayout device_;
  int64_t snapshots_, pages_;
  size_t bytes_ = 0;
  std::byte* pinned_ = nullptr;  // [snapshots][conv | delta], then [pages][attention_layers][page_bytes]
};

}  // namespace duet::backend::cuda
