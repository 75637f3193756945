#pragma once
// fp32 products on the tensor cores (sm_80 and later): an fp32 operand x is split into x = hi + lo, hi its TF32
// rounding and lo the TF32 rounding of the rest, and A B is taken as A_lo B_hi + A_hi B_lo + A_hi B_hi (the small
// terms first; A_lo B_lo, about 2^-22 of the product, is left out), each an m16n8k8 TF32 mma.sync accumulating in
// fp32. So a product keeps about fp32's precision where one TF32 product keeps about 11 bits: the GDN walk's state
// stays fp32 in fact, not only in storage. kPasses 1 takes A_hi B_hi alone (TF32's precision; a planted control of the
// tests, never production).
#include <cuda_runtime.h>

#include <cstdint>

namespace duet::backend::cuda {

__device__ __forceinline__ uint32_t round_to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// Fragments of an m16n8k8 TF32 product, g = lane / 4 and t = lane % 4: A 16 x 8 (a0: row g, column t; a1: row g + 8,
// column t; a2: row g, column t + 4; a3: row g + 8, column t + 4), B 8 x 8 (b0: row t, column g; b1: row t + 4, column
// g), C 16 x 8 (c0, c1: row g, columns 2t and 2t + 1; c2, c3: row g + 8, the same columns). An output element is a
// function of its own row of A and column of B alone.
template <int kRegs>
struct Tf32Split {
  uint32_t hi[kRegs], lo[kRegs];
};

template <int kPasses, int kRegs>
__device__ __forceinline__ Tf32Split<kRegs> split_tf32(const float (&x)[kRegs]) {
  static_assert(kPasses == 1 || kPasses == 3, "one TF32 product or three");
  Tf32Split<kRegs> s;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    s.hi[i] = round_to_tf32(x[i]);
    s.lo[i] = kPasses == 3 ? round_to_tf32(x[i] - __uint_as_float(s.hi[i])) : 0u;
  }
  return s;
}

__device__ __forceinline__ void mma_16x8x8_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += A B for one 16 x 8 x 8 step of fp32 operands, split by split_tf32.
template <int kPasses>
__device__ __forceinline__ void mma_fp32_16x8x8(float (&c)[4], const Tf32Split<4>& a, const Tf32Split<2>& b) {
  if constexpr (kPasses == 3) {
    mma_16x8x8_tf32(c, a.lo, b.hi);
    mma_16x8x8_tf32(c, a.hi, b.lo);
  }
  mma_16x8x8_tf32(c, a.hi, b.hi);
}

}  // namespace duet::backend::cuda
