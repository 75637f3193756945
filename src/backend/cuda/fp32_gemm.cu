// y = x w^T in fp32 for a decision head's products (launch_fp32_gemm in kernels.h). Three kernels, one contract: each
// output is one fma chain over k in order, from +0, so its bits depend on its x row and w row alone, never on m, on
// the tile it sits in or on which kernel ran. The kernel is picked by shape for speed only:
// - tiles64: one 64 x 64 tile per block, 256 threads of 4 x 4 outputs, k in steps of 16 (the first kernel; any k);
// - skinny (m <= 192): the head's few-row products (a decision's options and questions against [1024, 4096] weights):
//   8 rows x 16 columns per block of 128 threads, one output a thread, k staged 128 at a time through a ring of three
//   cp.async stages, so the weights stream from many SMs at once (tiles64 gave such a product 16-64 blocks);
// - wide (many rows): the memory rows' products ([L, 4096] x [4096, 1024] as the prompt arrives, [L, 1024] x
//   [1024, 1024] for the attention's keys and values), 128 x 128 tiles, 256 threads of 8 x 8 outputs, k in steps
//   of 8 double-buffered: four times the fmas per shared-memory read of tiles64.
// The new kernels take k % 16 == 0 and 16-byte aligned x and w (the head's shapes are 1024 / 4096 wide); otherwise
// tiles64 runs, whose zero padding to a multiple of 16 then matters (fmaf(0, 0, acc) is acc, but for -0 it is +0).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_sync.h"

namespace duet::backend::cuda {

namespace {

constexpr int kTile = 64, kStep = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    fp32_gemm_tiles64(const float* __restrict__ x, int32_t m, const float* __restrict__ w, int32_t n, int32_t k,
                      float* __restrict__ y) {
  __shared__ float xs[kStep][kTile + 4];  // [k][row]: a thread's 4 rows are adjacent
  __shared__ float ws[kStep][kTile + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[4][4] = {};
  for (int32_t k0 = 0; k0 < k; k0 += kStep) {
#pragma unroll
    for (int e = 0; e < kTile * kStep / kThreads; ++e) {
      const int idx = tid + e * kThreads, row = idx / kStep, kk = idx % kStep;
      const bool in_k = k0 + kk < k;
      xs[kk][row] = in_k && r0 + row < m ? x[(r0 + row) * k + k0 + kk] : 0.0f;
      ws[kk][row] = in_k && c0 + row < n ? w[(c0 + row) * k + k0 + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i], b[i] = ws[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r0 + ty * 4 + i, col = c0 + tx * 4 + j;
      if (row < m && col < n) y[row * n + col] = acc[i][j];
    }
}

// ---- skinny: 8 rows x 16 columns a block, one output a thread.
constexpr int kSkinnyRows = 8, kSkinnyCols = 16, kSkinnyThreads = kSkinnyRows * kSkinnyCols;
constexpr int kSkinnyStep = 128, kSkinnyStages = 3;
// A staged row's stride in floats: 16-byte rows for cp.async, and a float4 read by 8 threads of 8 different columns
// (one phase of a 128-bit shared load) lands on 8 different bank quads: 132 * 4 bytes = 33 quads, odd.
constexpr int kSkinnyStride = kSkinnyStep + 4;

__global__ void __launch_bounds__(kSkinnyThreads)
    fp32_gemm_skinny(const float* __restrict__ x, int32_t m, const float* __restrict__ w, int32_t n, int32_t k,
                     float* __restrict__ y) {
  __shared__ __align__(16) float ws[kSkinnyStages][kSkinnyCols][kSkinnyStride];
  __shared__ __align__(16) float xs[kSkinnyStages][kSkinnyRows][kSkinnyStride];
  const int tid = threadIdx.x, c = tid % kSkinnyCols, r = tid / kSkinnyCols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kSkinnyCols,
                r0 = static_cast<int64_t>(blockIdx.y) * kSkinnyRows;
  const int steps = (k + kSkinnyStep - 1) / kSkinnyStep;
  constexpr int kQuads = kSkinnyStep / 4;  // 16-byte chunks a staged row
  // Zero-filled (bytes 0) past n, m or k: such a chunk is never read for an output that is stored.
  auto issue = [&](int step) {
    const int stage = step % kSkinnyStages;
    const int32_t k0 = step * kSkinnyStep, len = min(kSkinnyStep, k - k0);
#pragma unroll
    for (int e = 0; e < kSkinnyCols * kQuads / kSkinnyThreads; ++e) {
      const int idx = tid + e * kSkinnyThreads, row = idx / kQuads, q = idx % kQuads;
      const bool ok = c0 + row < n && q * 4 < len;
      cp_async_16(&ws[stage][row][q * 4], ok ? w + (c0 + row) * k + k0 + q * 4 : w, ok ? 16 : 0);
    }
#pragma unroll
    for (int e = 0; e < kSkinnyRows * kQuads / kSkinnyThreads; ++e) {
      const int idx = tid + e * kSkinnyThreads, row = idx / kQuads, q = idx % kQuads;
      const bool ok = r0 + row < m && q * 4 < len;
      cp_async_16(&xs[stage][row][q * 4], ok ? x + (r0 + row) * k + k0 + q * 4 : x, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int s = 0; s < kSkinnyStages - 1; ++s) {
    if (s < steps) issue(s);
    cp_async_commit();  // an empty group keeps the count of groups in step with the steps
  }
  float acc = 0.0f;
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kSkinnyStages - 2>();  // this thread's copies of `step` are in
    __syncthreads();  // everyone's are; and everyone finished step - 1, whose stage the next issue overwrites
    if (step + kSkinnyStages - 1 < steps) issue(step + kSkinnyStages - 1);
    cp_async_commit();
    const int stage = step % kSkinnyStages;
    const int32_t len = min(kSkinnyStep, k - step * kSkinnyStep);  // a multiple of 16 (k % 16 == 0)
    const float* xr = &xs[stage][r][0];
    const float* wr = &ws[stage][c][0];
#pragma unroll 4
    for (int kk = 0; kk < len; kk += 4) {
      const float4 a = *reinterpret_cast<const float4*>(xr + kk);
      const float4 b = *reinterpret_cast<const float4*>(wr + kk);
      acc = fmaf(a.x, b.x, acc);
      acc = fmaf(a.y, b.y, acc);
      acc = fmaf(a.z, b.z, acc);
      acc = fmaf(a.w, b.w, acc);
    }
  }
  if (r0 + r < m && c0 + c < n) y[(r0 + r) * n + c0 + c] = acc;
}

// ---- wide: 128 x 128 tiles, 8 x 8 outputs a thread (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise
// with tx), so that each of a thread's shared reads is one float4 and a warp's reads are conflict-free.
constexpr int kWideTile = 128, kWideStep = 8, kWideThreads = 256;
// [k][row] with rows padded to 132 floats: the transposing stores of a warp (16 rows x 2 k offsets) hit 32 banks.
constexpr int kWideStride = kWideTile + 4;

__global__ void __launch_bounds__(kWideThreads, 2)
    fp32_gemm_wide(const float* __restrict__ x, int32_t m, const float* __restrict__ w, int32_t n, int32_t k,
                   float* __restrict__ y) {
  __shared__ __align__(16) float xs[2][kWideStep][kWideStride];
  __shared__ __align__(16) float ws[2][kWideStep][kWideStride];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kWideTile, c0 = static_cast<int64_t>(blockIdx.x) * kWideTile;
  // Each thread loads one float4 (4 k values) of one x row and one w row a step.
  const int lr = tid / 2, lk = (tid % 2) * 4;
  const bool x_ok = r0 + lr < m, w_ok = c0 + lr < n;
  const float* xp = x + (x_ok ? (r0 + lr) * k : 0) + lk;
  const float* wp = w + (w_ok ? (c0 + lr) * k : 0) + lk;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto stage = [&](int buf, float4 xv, float4 wv) {
    xs[buf][lk + 0][lr] = xv.x, xs[buf][lk + 1][lr] = xv.y, xs[buf][lk + 2][lr] = xv.z, xs[buf][lk + 3][lr] = xv.w;
    ws[buf][lk + 0][lr] = wv.x, ws[buf][lk + 1][lr] = wv.y, ws[buf][lk + 2][lr] = wv.z, ws[buf][lk + 3][lr] = wv.w;
  };
  stage(0, x_ok ? __ldg(reinterpret_cast<const float4*>(xp)) : zero,
        w_ok ? __ldg(reinterpret_cast<const float4*>(wp)) : zero);
  __syncthreads();
  float acc[8][8] = {};
  int buf = 0;
  for (int32_t k0 = 0; k0 < k; k0 += kWideStep) {
    const bool more = k0 + kWideStep < k;
    float4 xv = zero, wv = zero;  // the next step's, loaded while this one computes
    if (more) {
      if (x_ok) xv = __ldg(reinterpret_cast<const float4*>(xp + k0 + kWideStep));
      if (w_ok) wv = __ldg(reinterpret_cast<const float4*>(wp + k0 + kWideStep));
    }
#pragma unroll
    for (int kk = 0; kk < kWideStep; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&xs[buf][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&xs[buf][kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&ws[buf][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&ws[buf][kk][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read in the step before this one, which every thread finished before the barrier
    // that ended it: it may be written now, and one barrier a step orders both ways.
    if (more) stage(buf ^ 1, xv, wv);
    __syncthreads();
    buf ^= 1;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = r0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (row >= m) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t col = c0 + half * 64 + tx * 4;
      float* out = y + row * n + col;
      const float* v = &acc[i][half * 4];
      if (col + 3 < n && n % 4 == 0) {
        *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        for (int j = 0; j < 4; ++j)
          if (col + j < n) out[j] = v[j];
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* fp32_gemm_kernel_name(Fp32GemmKernel kernel) {
  switch (kernel) {
    case Fp32GemmKernel::tiles64:
      return "tiles64";
    case Fp32GemmKernel::skinny:
      return "skinny";
    case Fp32GemmKernel::wide:
      return "wide";
  }
  return "?";
}

bool fp32_gemm_kernel_fits(Fp32GemmKernel kernel, const float* x, const float* w, int32_t k) {
  if (kernel == Fp32GemmKernel::tiles64) return true;
  return k > 0 && k % 16 == 0 && aligned16(x) && aligned16(w);
}

Fp32GemmKernel fp32_gemm_kernel_for(const float* x, int32_t m, const float* w, int32_t n, int32_t k) {
  if (!fp32_gemm_kernel_fits(Fp32GemmKernel::skinny, x, w, k)) return Fp32GemmKernel::tiles64;
  // skinny re-reads the weights once per 8 rows, so its time grows with m: on the H200 (bench_fp32_gemm, [1024, 4096]
  // weights) 64 rows took 64 us, 136 rows 132 us against tiles64's 270 us at any of these m; 192 keeps it ahead.
  if (m <= 192) return Fp32GemmKernel::skinny;
  // The wide kernel's tiles are four times tiles64's: with fewer than half a wave of them (2 blocks an SM) the GPU
  // would idle; such mid-sized products stay on tiles64.
  const int64_t wide_tiles = ((m + kWideTile - 1) / kWideTile) * static_cast<int64_t>((n + kWideTile - 1) / kWideTile);
  return wide_tiles >= 132 ? Fp32GemmKernel::wide : Fp32GemmKernel::tiles64;
}

void launch_fp32_gemm_with(Fp32GemmKernel kernel, const float* x, int32_t m, const float* w, int32_t n, int32_t k,
                           float* y, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  if (!fp32_gemm_kernel_fits(kernel, x, w, k))
    throw std::invalid_argument(std::string("fp32 gemm: the ") + fp32_gemm_kernel_name(kernel) +
                                " kernel needs k % 16 == 0 and 16-byte aligned operands (k " + std::to_string(k) + ")");
  switch (kernel) {
    case Fp32GemmKernel::tiles64: {
      const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
      fp32_gemm_tiles64<<<grid, kThreads, 0, stream>>>(x, m, w, n, k, y);
      check_launch("fp32_gemm_tiles64");
      return;
    }
    case Fp32GemmKernel::skinny: {
      const dim3 grid((n + kSkinnyCols - 1) / kSkinnyCols, (m + kSkinnyRows - 1) / kSkinnyRows);
      fp32_gemm_skinny<<<grid, kSkinnyThreads, 0, stream>>>(x, m, w, n, k, y);
      check_launch("fp32_gemm_skinny");
      return;
    }
    case Fp32GemmKernel::wide: {
      const dim3 grid((n + kWideTile - 1) / kWideTile, (m + kWideTile - 1) / kWideTile);
      fp32_gemm_wide<<<grid, kWideThreads, 0, stream>>>(x, m, w, n, k, y);
      check_launch("fp32_gemm_wide");
      return;
    }
  }
}

void launch_fp32_gemm(const float* x, int32_t m, const float* w, int32_t n, int32_t k, float* y, cudaStream_t stream) {
  static const bool first_kernel_only = [] {
    const char* value = std::getenv("DUET_FP32_GEMM");
    return value != nullptr && std::string_view(value) == "tiles64";
  }();
  const Fp32GemmKernel kernel = first_kernel_only ? Fp32GemmKernel::tiles64 : fp32_gemm_kernel_for(x, m, w, n, k);
  launch_fp32_gemm_with(kernel, x, m, w, n, k, y, stream);
}

}  // namespace duet::backend::cuda
