#include "backend/cuda/host_tier.h"

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {

CudaHostTier::CudaHostTier(const DeviceStateLayout& device, int64_t snapshots, int64_t pages)
    : device_(device), snapshots_(snapshots), pages_(pages) {
  if (snapshots < 0 || pages < 0) fail("cuda host tier: {} snapshots and {} pages", snapshots, pages);
  bytes_ = static_cast<size_t>(snapshots) * (device.conv_bytes + device.delta_bytes) +
           static_cast<size_t>(pages) * static_cast<size_t>(device.attention_layers) * device.page_bytes;
  if (bytes_ != 0)
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), bytes_, cudaHostAllocDefault),
               "prompt cache host tier: pinned host memory (--prompt-cache-host-gib)");
}

CudaHostTier::~CudaHostTier() {
  // Copies still queued on the step stream read or write this memory.
  if (pinned_ != nullptr) {
    cudaStreamSynchronize(device_.stream);
    cudaFreeHost(pinned_);
  }
}

void CudaHostTier::check_not_capturing(const char* what) const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(device_.stream, &status), what);
  if (status != cudaStreamCaptureStatusNone)
    fail("cuda host tier: {} while a step is being captured into a graph (copies run only between steps)", what);
}

std::byte* CudaHostTier::host_snapshot(int32_t host) const {
  if (host < 0 || host >= snapshots_) fail("cuda host tier: snapshot {} of {}", host, snapshots_);
  return pinned_ + static_cast<size_t>(host) * (device_.conv_bytes + device_.delta_bytes);
}

std::byte* CudaHostTier::host_page(int32_t host) const {
  if (host < 0 || host >= pages_) fail("cuda host tier: page {} of {}", host, pages_);
  return pinned_ + static_cast<size_t>(snapshots_) * (device_.conv_bytes + device_.delta_bytes) +
         static_cast<size_t>(host) * static_cast<size_t>(device_.attention_layers) * device_.page_bytes;
}

std::byte* CudaHostTier::device_page(int32_t page) const {
  if (page < 0 || page >= device_.pages) fail("cuda host tier: KV page {} of {}", page, device_.pages);
  return device_.kv + static_cast<size_t>(page) * device_.page_bytes;
}

void CudaHostTier::save_snapshot(int32_t snapshot, int32_t host) {
  check_not_capturing("saving a GDN snapshot to the host");
  if (snapshot < 0 || snapshot >= device_.snapshots) fail("cuda host tier: GDN snapshot {}", snapshot);
  std::byte* to = host_snapshot(host);
  const auto s = static_cast<size_t>(snapshot);
  check_cuda(cudaMemcpyAsync(to, device_.conv_snapshots + s * device_.conv_bytes, device_.conv_bytes,
                             cudaMemcpyDeviceToHost, device_.stream),
             "host tier: save a GDN snapshot's conv state");
  check_cuda(cudaMemcpyAsync(to + device_.conv_bytes, device_.delta_snapshots + s * device_.delta_bytes,
                             device_.delta_bytes, cudaMemcpyDeviceToHost, device_.stream),
             "host tier: save a GDN snapshot's delta-rule state");
}

void CudaHostTier::restore_snapshot(int32_t host, int32_t snapshot) {
  check_not_capturing("restoring a GDN snapshot from the host");
  if (snapshot < 0 || snapshot >= device_.snapshots) fail("cuda host tier: GDN snapshot {}", snapshot);
  const std::byte* from = host_snapshot(host);
  const auto s = static_cast<size_t>(snapshot);
  check_cuda(cudaMemcpyAsync(device_.conv_snapshots + s * device_.conv_bytes, from, device_.conv_bytes,
                             cudaMemcpyHostToDevice, device_.stream),
             "host tier: restore a GDN snapshot's conv state");
  check_cuda(cudaMemcpyAsync(device_.delta_snapshots + s * device_.delta_bytes, from + device_.conv_bytes,
                             device_.delta_bytes, cudaMemcpyHostToDevice, device_.stream),
             "host tier: restore a GDN snapshot's delta-rule state");
}

// A page of every layer in one 2D copy: the layers lie `pages` pages apart on the device, back to back on the host.
void CudaHostTier::save_pages(std::span<const int32_t> pages, std::span<const int32_t> host) {
  check_not_capturing("saving KV pages to the host");
  if (pages.size() != host.size()) fail("cuda host tier: {} KV pages into {} host pages", pages.size(), host.size());
  const size_t pitch = static_cast<size_t>(device_.pages) * device_.page_bytes;
  for (size_t i = 0; i < pages.size(); ++i)
    check_cuda(
        cudaMemcpy2DAsync(host_page(host[i]), device_.page_bytes, device_page(pages[i]), pitch, device_.page_bytes,
                          static_cast<size_t>(device_.attention_layers), cudaMemcpyDeviceToHost, device_.stream),
        "host tier: save a KV page");
}

void CudaHostTier::restore_pages(std::span<const int32_t> host, std::span<const int32_t> pages) {
  check_not_capturing("restoring KV pages from the host");
  if (pages.size() != host.size()) fail("cuda host tier: {} host pages into {} KV pages", host.size(), pages.size());
  const size_t pitch = static_cast<size_t>(device_.pages) * device_.page_bytes;
  for (size_t i = 0; i < pages.size(); ++i)
    check_cuda(
        cudaMemcpy2DAsync(device_page(pages[i]), pitch, host_page(host[i]), device_.page_bytes, device_.page_bytes,
                          static_cast<size_t>(device_.attention_layers), cudaMemcpyHostToDevice, device_.stream),
        "host tier: restore a KV page");
}

}  // namespace duet::backend::cuda
