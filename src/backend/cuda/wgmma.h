#pragma once
// Hopper's warpgroup MMA (wgmma, sm_90a): one warpgroup (4 warps, 128 threads) multiplies a 64 x 16 A tile by a
// 16 x N B tile, both read by the tensor cores straight from shared memory, into N / 2 fp32 accumulators a thread.
// Used by the decode GEMM's warpgroup engine (skinny_gemm_wgmma.cu), where mma.sync's operand traffic through
// registers was the limit (docs/benchmarks.md, tenth round). What it computes was measured before use
// (tests/cuda/wgmma_probe.cu): the bits of an output element do not depend on N.
//
// Operand layout (no swizzle, both operands K-major): core matrices of 8 rows x 16 bytes (8 BF16 of k), stored as
// 128 contiguous bytes; `k_step_bytes` apart along k (the descriptor's leading byte offset) and `row_group_bytes`
// apart along the rows (its stride byte offset).
//
// Accumulators of m64nNk16: warp w of the warpgroup, lane (g = lane / 4, t = lane % 4) holds, for each 8 columns j,
// d[4j + 0], d[4j + 1] at row 16w + g, columns 8j + 2t, 8j + 2t + 1, and d[4j + 2], d[4j + 3] at row 16w + g + 8.
#include <cstdint>

#include "backend/cuda/mma_sync.h"

namespace duet::backend::cuda {

__device__ __forceinline__ uint64_t wgmma_descriptor(const void* tile, uint32_t k_step_bytes,
                                                     uint32_t row_group_bytes) {
  uint64_t d = (smem_address(tile) & 0x3ffffu) >> 4;
  d |= static_cast<uint64_t>((k_step_bytes >> 4) & 0x3fffu) << 16;
  d |= static_cast<uint64_t>((row_group_bytes >> 4) & 0x3fffu) << 32;
  return d;  // base offset 0, no swizzle
}

// Orders this thread's earlier shared-memory writes (plain stores and cp.async, once waited for) before the tensor
// cores' reads of the async proxy; a block barrier after it makes every thread's writes visible to them.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Before a warpgroup's first wgmma, and after its accumulators were touched by other instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// d += A B, BF16 in, fp32 accumulators (kN / 2 per thread): m64nNk16 for N = 8, 16, 32, 64.
template <int kN>
__device__ __forceinline__ void wgmma_bf16(float (&d)[kN / 2], uint64_t a, uint64_t b);

template <>
__device__ __forceinline__ void wgmma_bf16<8>(float (&d)[4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16<16>(float (&d)[8], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, "
      "0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16<32>(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16<64>(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, "
      "1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1));
}

}  // namespace duet::backend::cuda
