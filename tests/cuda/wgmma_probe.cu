// bench_wgmma_probe: what Hopper's warpgroup MMA (wgmma) computes, measured before a kernel relies on it.
//
// The decode GEMM (skinny_gemm.cu) keeps every output's bits independent of how many rows it runs with. Moving its
// wide launches from mma.sync to wgmma keeps that only if (1) wgmma's m64nNk16 gives an element the same bits whatever
// N is, and, for the narrow launches to stay on mma.sync, (2) wgmma and mma.sync m16n8k16 give the same bits for the
// same operands in the same k slots. It also pins down (3) the no-swizzle K-major shared-memory layout that the
// matrix descriptors describe: which of the two byte offsets steps along k and which along rows.
//
// Operands: random BF16 with exponents over [-12, 12] and random signs, accumulators seeded with random fp32, so
// that the order and width of the internal sums show in the last bits. Each trial is one 64 x 16 A tile and one
// 64 x 16 B tile (x rows), chained over 4 k16 steps as the decode GEMM chains them. Printed: per variant, the largest
// error against a double reference, and the count of elements whose bits differ between the paths.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/mma_sync.h"
#include "backend/cuda/wgmma.h"

namespace {

using bf16 = __nv_bfloat16;
using duet::backend::cuda::fence_shared_for_async_proxy;
using duet::backend::cuda::mma_16x8x16;
using duet::backend::cuda::wgmma_bf16;
using duet::backend::cuda::wgmma_commit;
using duet::backend::cuda::wgmma_descriptor;
using duet::backend::cuda::wgmma_fence;
using duet::backend::cuda::wgmma_wait;

constexpr int kM = 64, kK = 64, kN = 64, kSteps = kK / 16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

// Tile layout in shared memory: [row / 8][k chunk of 8][row % 8][8 BF16]: core matrices of 8 rows x 16 bytes, the
// chunks of one row group 128 bytes apart, row groups (kK / 8) * 128 bytes apart.
constexpr uint32_t kChunkBytes = 128, kGroupBytes = (kK / 8) * 128;

__device__ void stage(const bf16* src, int rows, bf16* dst) {
  for (int i = threadIdx.x; i < rows * (kK / 8); i += blockDim.x) {
    const int group = i / (8 * (kK / 8)), chunk = (i / 8) % (kK / 8), rr = i % 8;
    const int row = group * 8 + rr;
    *reinterpret_cast<uint4*>(dst + i * 8) = *reinterpret_cast<const uint4*>(src + row * kK + chunk * 8);
  }
}

// One trial per block of 128 threads. variant 0: leading = k step (128), stride = row group; 1: the two swapped.
// n_wide: m64n64 (else 8 launches of m64n8, one per 8 columns). out: [kM][kN].
__global__ void wgmma_kernel(const bf16* a, const bf16* b, const float* c, float* out, int variant, int n_wide) {
  __shared__ __align__(128) bf16 sa[kM * kK];
  __shared__ __align__(128) bf16 sb[kN * kK];
  const int trial = blockIdx.x;
  stage(a + trial * kM * kK, kM, sa);
  stage(b + trial * kN * kK, kN, sb);
  fence_shared_for_async_proxy();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t lead = variant == 0 ? kChunkBytes : kGroupBytes;
  const uint32_t stride = variant == 0 ? kGroupBytes : kChunkBytes;
  const float* ct = c + trial * kM * kN;
  float* ot = out + trial * kM * kN;
  auto at = [&](int row, int col) { return row * kN + col; };
  const int r0 = 16 * warp + g;
  if (n_wide) {
    float d[32];
    for (int j = 0; j < 8; ++j) {
      d[4 * j + 0] = ct[at(r0, 8 * j + 2 * t)];
      d[4 * j + 1] = ct[at(r0, 8 * j + 2 * t + 1)];
      d[4 * j + 2] = ct[at(r0 + 8, 8 * j + 2 * t)];
      d[4 * j + 3] = ct[at(r0 + 8, 8 * j + 2 * t + 1)];
    }
    wgmma_fence();
    for (int s = 0; s < kSteps; ++s)  // k16 step s: chunks 2s, 2s + 1
      wgmma_bf16<64>(d, wgmma_descriptor(sa + s * 2 * 64, lead, stride),
                     wgmma_descriptor(sb + s * 2 * 64, lead, stride));
    wgmma_commit();
    wgmma_wait<0>();
    for (int j = 0; j < 8; ++j) {
      ot[at(r0, 8 * j + 2 * t)] = d[4 * j + 0];
      ot[at(r0, 8 * j + 2 * t + 1)] = d[4 * j + 1];
      ot[at(r0 + 8, 8 * j + 2 * t)] = d[4 * j + 2];
      ot[at(r0 + 8, 8 * j + 2 * t + 1)] = d[4 * j + 3];
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      float d[4] = {ct[at(r0, 8 * j + 2 * t)], ct[at(r0, 8 * j + 2 * t + 1)], ct[at(r0 + 8, 8 * j + 2 * t)],
                    ct[at(r0 + 8, 8 * j + 2 * t + 1)]};
      wgmma_fence();
      for (int s = 0; s < kSteps; ++s)
        wgmma_bf16<8>(d, wgmma_descriptor(sa + s * 2 * 64, lead, stride),
                      wgmma_descriptor(sb + j * 8 * kK + s * 2 * 64, lead, stride));  // row group j of B
      wgmma_commit();
      wgmma_wait<0>();
      ot[at(r0, 8 * j + 2 * t)] = d[0];
      ot[at(r0, 8 * j + 2 * t + 1)] = d[1];
      ot[at(r0 + 8, 8 * j + 2 * t)] = d[2];
      ot[at(r0 + 8, 8 * j + 2 * t + 1)] = d[3];
    }
  }
}

// The same products by mma.sync m16n8k16, natural k slots (slot s of k16 step q = element 16q + s); reversed: slot s
// takes element 16q + 15 - s of both operands (whether the order within one MMA shows in its bits).
__global__ void mma_sync_kernel(const bf16* a, const bf16* b, const float* c, float* out, int reversed) {
  const int trial = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bf16* at_ = a + trial * kM * kK;
  const bf16* bt = b + trial * kN * kK;
  const float* ct = c + trial * kM * kN;
  float* ot = out + trial * kM * kN;
  // Slots (s, s + 1) of a k16 step starting at p0: elements s, s + 1, or 15 - s, 14 - s when reversed.
  auto pair_at = [&](const bf16* p0, int s) {
    if (!reversed) return *reinterpret_cast<const uint32_t*>(p0 + s);
    return __byte_perm(*reinterpret_cast<const uint32_t*>(p0 + 14 - s), 0, 0x1032);
  };
  for (int mt = warp; mt < kM / 16; mt += 4)
    for (int j = 0; j < kN / 8; ++j) {
      const int r0 = 16 * mt + g, col = 8 * j + 2 * t;
      float d[4] = {ct[r0 * kN + col], ct[r0 * kN + col + 1], ct[(r0 + 8) * kN + col], ct[(r0 + 8) * kN + col + 1]};
      for (int q = 0; q < kSteps; ++q) {
        const int k0 = 16 * q, s = 2 * t;
        const bf16 *ra = at_ + r0 * kK + k0, *rb = at_ + (r0 + 8) * kK + k0, *cb = bt + (8 * j + g) * kK + k0;
        mma_16x8x16(d, pair_at(ra, s), pair_at(rb, s), pair_at(ra, s + 8), pair_at(rb, s + 8), pair_at(cb, s),
                    pair_at(cb, s + 8));
      }
      ot[r0 * kN + col] = d[0];
      ot[r0 * kN + col + 1] = d[1];
      ot[(r0 + 8) * kN + col] = d[2];
      ot[(r0 + 8) * kN + col + 1] = d[3];
    }
}

float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main() {
  const int trials = 256;
  std::mt19937 rng(20261203);
  std::uniform_int_distribution<int> exponent(-12, 12), mantissa(0, 127), sign(0, 1);
  auto random_bf16 = [&] {
    const float v = std::ldexp(1.0f + mantissa(rng) / 128.0f, exponent(rng)) * (sign(rng) ? -1.0f : 1.0f);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(u >> 16);  // exact: 7 mantissa bits
  };
  std::vector<uint16_t> a(trials * kM * kK), b(trials * kN * kK);
  for (auto& v : a) v = random_bf16();
  for (auto& v : b) v = random_bf16();
  std::vector<float> c(trials * kM * kN);
  std::uniform_real_distribution<float> cu(-64.0f, 64.0f);
  for (auto& v : c) v = cu(rng);

  bf16 *da, *db;
  float *dc, *dout;
  check(cudaMalloc(&da, a.size() * 2), "malloc");
  check(cudaMalloc(&db, b.size() * 2), "malloc");
  check(cudaMalloc(&dc, c.size() * 4), "malloc");
  check(cudaMalloc(&dout, c.size() * 4), "malloc");
  check(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice), "copy");

  // The double reference.
  std::vector<double> ref(c.size());
  for (int tr = 0; tr < trials; ++tr)
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) {
        double s = c[(tr * kM + i) * kN + j];
        for (int k = 0; k < kK; ++k)
          s += static_cast<double>(bf16_to_float(a[(tr * kM + i) * kK + k])) * bf16_to_float(b[(tr * kN + j) * kK + k]);
        ref[(tr * kM + i) * kN + j] = s;
      }
  auto fetch = [&] {
    check(cudaDeviceSynchronize(), "run");
    std::vector<float> out(c.size());
    check(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost), "copy back");
    return out;
  };
  auto error = [&](const std::vector<float>& out) {
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i)
      worst = std::max(worst, std::abs(out[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
    return worst;
  };
  auto differing = [](const std::vector<float>& x, const std::vector<float>& y) {
    size_t n = 0;
    for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], 4) != 0;
    return n;
  };

  mma_sync_kernel<<<trials, 128>>>(da, db, dc, dout, 0);
  const auto sync_out = fetch();
  mma_sync_kernel<<<trials, 128>>>(da, db, dc, dout, 1);
  const auto sync_reversed = fetch();
  std::printf(
      "mma.sync m16n8k16: max relative error %.3g against the double reference; slots reversed within each k16: "
      "error %.3g, bits differ in %zu of %zu\n",
      error(sync_out), error(sync_reversed), differing(sync_out, sync_reversed), sync_out.size());
  // Variant 1 (the offsets read the other way round) is not run: on the H200 it reads outside the tiles and faults
  // the context (2026-12-03), which is the answer to (3).
  for (int variant = 0; variant < 1; ++variant) {
    wgmma_kernel<<<trials, 128>>>(da, db, dc, dout, variant, 1);
    const auto wide = fetch();
    wgmma_kernel<<<trials, 128>>>(da, db, dc, dout, variant, 0);
    const auto narrow = fetch();
    std::printf(
        "wgmma, %s: n64 max relative error %.3g, n8 %.3g; n64 vs n8 bits differ in %zu of %zu; n64 vs mma.sync in "
        "%zu; n8 vs mma.sync in %zu\n",
        variant == 0 ? "leading = k step, stride = row group" : "leading = row group, stride = k step", error(wide),
        error(narrow), differing(wide, narrow), wide.size(), differing(wide, sync_out), differing(narrow, sync_out));
  }
  return 0;
}
