#pragma once
// Hopper's warpgroup MMA (wgmma, sm_90a): one warpgroup (4 warps, 128 threads) multiplies a 64 x 16 A tile by a
// 16 x N B tile into N / 2 fp32 accumulators a thread; B is read by the tensor cores straight from shared memory, A
// from shared memory too (wgmma_probe.cu) or from registers (the decode GEMM's skinny_gemm_regs_kernel, where
// mma.sync's instruction count at 64 rows was the limit). What it computes was measured before use
// (tests/cuda/wgmma_probe.cu): the bits of an output element do not depend on N, and equal mma.sync's for the same
// k16 groups.
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

// The same for a K-major operand in TMA's 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B, or stores that swizzle alike):
// rows of 64 BF16 (128 bytes) one after another, 16-byte chunk c of row r stored at chunk c ^ (r % 8), in atoms of 8
// rows (1,024 bytes, the stride byte offset) that start 1,024-byte aligned. A k16 group j of the rows starts 32 j
// bytes into them: the tensor cores apply the swizzle to the address they form, so the start simply moves.
__device__ __forceinline__ uint64_t wgmma_descriptor_sw128(uint32_t smem_byte_address) {
  uint64_t d = (smem_byte_address & 0x3ffffu) >> 4;
  d |= uint64_t{1} << 16;          // leading byte offset: unused by swizzled K-major layouts
  d |= uint64_t{1024 >> 4} << 32;  // stride byte offset: one atom of 8 rows
  d |= uint64_t{1} << 62;          // layout: 128-byte swizzle
  return d;
}

// Orders this thread's earlier shared-memory writes (plain stores and cp.async, once waited for) before the tensor
// cores' reads of the async proxy; a block barrier after it makes every thread's writes visible to them.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Pins accumulators in place for the compiler (emits nothing): no instruction that reads or defines them moves across
// it. After the last wait, so the reads of the finished sums stay after it. Never between a wgmma and its wait: there
// it counts as defining them, and ptxas serializes the wgmma (C7515).
template <int kTiles>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(acc[j][i])::"memory");
}
// Before a warpgroup's first wgmma, and after its accumulators were touched by other instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// d += A B, BF16 in, fp32 accumulators (kN / 2 per thread): m64nNk16 for N = 8 and 64 (the probe's widths).
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

// d += A B with A in registers (m64nNk16, N = 8 kTiles): warp w of the warpgroup gives rows 16w .. 16w + 15 of A in
// mma.sync m16n8k16's A layout (a0: row g, k slots 2t, 2t + 1; a1: row g + 8; a2, a3: the same rows, slots 2t + 8,
// 2t + 9), B (16 x N, K-major) from shared memory by its descriptor. acc[j] is n8 tile j in mma.sync's C layout, which
// is wgmma's accumulator layout (above). Always accumulates (scale-d true): a chain starts from zeroed accumulators.
template <int kTiles>
__device__ __forceinline__ void wgmma_bf16_a_registers(float (&acc)[kTiles][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                       uint32_t a3, uint64_t b);

template <>
__device__ __forceinline__ void wgmma_bf16_a_registers<1>(float (&acc)[1][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                          uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_a_registers<2>(float (&acc)[2][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                          uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_a_registers<4>(float (&acc)[4][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                          uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_a_registers<8>(float (&acc)[8][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                          uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]),
        "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]),
        "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]),
        "+f"(acc[7][2]), "+f"(acc[7][3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

// d += A B with both operands in shared memory by descriptor (m64nNk16, N = 8 kTiles), accumulators in mma.sync's C
// layout as above. Always accumulates: a chain starts from zeroed accumulators.
template <int kTiles>
__device__ __forceinline__ void wgmma_bf16_shared(float (&acc)[kTiles][4], uint64_t a, uint64_t b);

template <>
__device__ __forceinline__ void wgmma_bf16_shared<1>(float (&acc)[1][4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_shared<2>(float (&acc)[2][4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_shared<4>(float (&acc)[4][4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3])
      : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_bf16_shared<8>(float (&acc)[8][4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, "
      "1, 0, 0;\n}"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]),
        "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]),
        "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]),
        "+f"(acc[7][2]), "+f"(acc[7][3])
      : "l"(a), "l"(b), "r"(1));
}

}  // namespace duet::backend::cuda
