#pragma once
// Warp-level tensor-core and asynchronous-copy primitives (sm_80 and later), shared by the kernels that stage tiles in
// shared memory and multiply them with mma.sync: the skinny GEMM and prefill attention.
#include <cuda_runtime.h>

#include <cstdint>

namespace duet::backend::cuda {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_address(dst)), "l"(src), "r"(bytes)
               : "memory");
}
// 8 bytes global -> shared (through L1: the 8-byte form has no L1 bypass); `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_8(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(smem_address(dst)), "l"(src), "r"(bytes)
               : "memory");
}
// 4 bytes global -> shared (through L1), for operands gathered from 4-byte pieces; `bytes` 0 writes zeros.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_address(dst)), "l"(src), "r"(bytes)
               : "memory");
}
// A hint: bring the 128-byte line that holds p into L2 ahead of the loads that need it. A plain per-thread prefetch:
// the bulk form (cp.async.bulk.prefetch) takes its address in a uniform register, so a warp whose lanes prefetch
// 16 different rows ran it as a loop of 16 rounds, about 130 instructions a step (the SASS, 2026-12-02).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
// A streamed weight chunk (16 bytes): read once per launch, so it bypasses L1 and leaves it to what is read again.
__device__ __forceinline__ uint4 load_weight_chunk(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// c += A B for one m16n8k16 tile: A 16 x 16 (a0: row g, k slots 2t..2t+1; a1: row g + 8, same slots; a2, a3: the
// same rows, slots 2t + 8..2t + 9), B 16 x 8 (b0: k slots 2t..2t+1 of column g; b1: slots 2t + 8..2t + 9), c: rows
// g and g + 8 (c0, c1 and c2, c3) of columns 2t and 2t + 1, where g = lane / 4 and t = lane % 4. Each 32-bit register
// holds 2 BF16, the lower slot in the low half, which is how 2 consecutive BF16 of memory land in a register. An
// output element is a function of its own row of A and column of B alone: the other rows and columns of the tile
// never change its bits.
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8 x 8 BF16 matrices from shared memory: lanes 8i .. 8i + 7 give the addresses of matrix i's rows (16 bytes
// each); register i of lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
// The same, each matrix transposed: register i of lane l receives column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

}  // namespace duet::backend::cuda
