#include "backend/cuda/host_products.h"

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"

namespace duet::backend::cuda {

HostProducts::~HostProducts() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (Buffer* b : {&x_, &y_})
    if (b->ptr) cudaFree(b->ptr);
  for (auto& [host, b] : weights_) cudaFree(b.ptr);
  if (stream_) cudaStreamDestroy(stream_);
}

float* HostProducts::grow(Buffer& buffer, size_t bytes) {
  if (bytes > buffer.bytes) {
    if (buffer.ptr) check_cuda(cudaFree(buffer.ptr), "host products: free");
    buffer.ptr = nullptr;
    buffer.bytes = 0;
    check_cuda(cudaMalloc(&buffer.ptr, bytes), "host products: device buffer");
    buffer.bytes = bytes;
  }
  return static_cast<float*>(buffer.ptr);
}

const float* HostProducts::weight(const Weight& w) {
  auto it = weights_.find(w.data);
  if (it != weights_.end()) return static_cast<const float*>(it->second.ptr);
  const size_t count = static_cast<size_t>(w.rows * w.cols);
  std::vector<float> converted(count);
  if (w.type == WeightType::f32) {
    std::memcpy(converted.data(), w.data, count * sizeof(float));
  } else {  // a BF16 is the top half of the fp32 with the same value
    const auto* bits = static_cast<const uint16_t*>(w.data);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
      std::memcpy(&converted[i], &u, sizeof u);
    }
  }
  Buffer buffer;
  float* device = grow(buffer, count * sizeof(float));
  check_cuda(cudaMemcpy(device, converted.data(), count * sizeof(float), cudaMemcpyHostToDevice),
             "host products: weight upload");
  weights_.emplace(w.data, buffer);
  return device;
}

void HostProducts::run(const float* x, int64_t m, const Weight& w, float* y) {
  if (m <= 0) return;
  if (m > INT32_MAX || w.rows > INT32_MAX || w.cols > INT32_MAX)
    fail("host products: {} x {} x {} is too large", m, w.rows, w.cols);
  std::lock_guard lock(mutex_);
  if (stream_ == nullptr)
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "host products stream");
  const float* wd = weight(w);
  const size_t x_bytes = static_cast<size_t>(m * w.cols) * sizeof(float);
  const size_t y_bytes = static_cast<size_t>(m * w.rows) * sizeof(float);
  float* xd = grow(x_, x_bytes);
  float* yd = grow(y_, y_bytes);
  check_cuda(cudaMemcpyAsync(xd, x, x_bytes, cudaMemcpyHostToDevice, stream_), "host products: rows up");
  launch_fp32_gemm(xd, static_cast<int32_t>(m), wd, static_cast<int32_t>(w.rows), static_cast<int32_t>(w.cols), yd,
                   stream_);
  check_cuda(cudaMemcpyAsync(y, yd, y_bytes, cudaMemcpyDeviceToHost, stream_), "host products: result down");
  check_cuda(cudaStreamSynchronize(stream_), "host products");
}

}  // namespace duet::backend::cuda
