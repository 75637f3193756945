#pragma once
// Hopper's transaction barriers and bulk copies: a copy engine (the TMA) writes shared memory and completes an mbarrier
// when the bytes it was told to expect have landed, so a block can keep many kilobytes in flight from one thread's
// instruction, without registers or per-thread loads. Shared by the decode GEMM's ring (skinny_gemm_tma.cu) and the
// dense delta-rule kernel's (gdn_delta_rule.cu). Addresses are shared-memory offsets (__cvta_generic_to_shared).
#include <cuda_runtime.h>

#include <cstdint>

namespace duet::backend::cuda {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// After the barriers are initialized, before the copy engine or another block may complete them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (done == 0);
}
// Before a bulk copy into shared memory that the block's threads read last (they are past a barrier since): their
// reads, generic-proxy accesses, ordered before the copy engine's writes, async-proxy ones.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared memory at dst, completing
// that many of `bar`'s expected bytes.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

}  // namespace duet::backend::cuda
