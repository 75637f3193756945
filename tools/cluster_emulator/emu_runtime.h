#pragma once
// A host emulator of one CUDA grid of thread-block clusters, for checking the control flow of sampling.cu: every
// device thread is a fiber; __syncthreads, warp intrinsics and the cluster barrier's arrive/wait halves block the
// fiber until the matching threads arrive (the PTX semantics: per thread, a wait completes once every non-exited
// thread of the cluster has arrived). Deadlocks, double arrives, waits without arrives, threads whose sequence of
// barriers differs from the others', lanes or threads meeting at different barrier sites, and reads of an exited
// block's shared memory are reported. Not modelled: the memory model (every access is sequentially consistent), the
// device's exp (glibc's, optionally nudged by an ulp), timing. Include after every standard header; x86-64 only.
#include <math.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

struct emu_uint3 {
  unsigned x, y, z;
};
emu_uint3& emu_threadIdx();
emu_uint3& emu_blockIdx();
emu_uint3& emu_gridDim();
uint64_t emu_warp_op(int op, unsigned mask, uint64_t bits, int arg, int line);
void emu_syncthreads(int line);
void emu_cluster_arrive(int line);
void emu_cluster_wait(int line);
unsigned emu_block_rank();
unsigned char* emu_smem();
void* emu_map_rank(const void* p, int rank);
void emu_run_grid(int grid, int threads, size_t smem, const std::function<void()>& body);
int emu_failures();  // barrier-sequence differences, site mismatches and reads of exited blocks so far

namespace cooperative_groups {
struct cluster_group {
  unsigned block_rank() const { return emu_block_rank(); }
  template <class T>
  T* map_shared_rank(T* p, int r) const {
    return static_cast<T*>(emu_map_rank(p, r));
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups

template <class T>
inline T emu_warp(int op, unsigned mask, T v, int arg, int line) {
  static_assert(sizeof(T) <= 8);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  const uint64_t r = emu_warp_op(op, mask, b, arg, line);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
#ifdef EMU_DEVICE_MACROS
#define __device__
#define __global__
#define __host__
#define __shared__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(a, b)
#define __cluster_dims__(a, b, c)
#define __align__(n) alignas(n)
#define threadIdx (emu_threadIdx())
#define blockIdx (emu_blockIdx())
#define gridDim (emu_gridDim())
#define __syncthreads() emu_syncthreads(__LINE__)
#define __shfl_sync(m, v, s) emu_warp(0, (m), (v), (s), __LINE__)
#define __shfl_xor_sync(m, v, s) emu_warp(1, (m), (v), (s), __LINE__)
#define __shfl_up_sync(m, v, s) emu_warp(2, (m), (v), (s), __LINE__)
#define __ballot_sync(m, p) static_cast<unsigned>(emu_warp(3, (m), static_cast<uint32_t>((p) ? 1u : 0u), 0, __LINE__))
#define __all_sync(m, p) static_cast<int>(emu_warp(4, (m), static_cast<uint32_t>((p) ? 1u : 0u), 0, __LINE__))
#define __match_any_sync(m, v) static_cast<unsigned>(emu_warp(5, (m), (v), 0, __LINE__))

template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
  return a < b ? b : a;
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline uint32_t __float_as_uint(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float __int_as_float(int u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline double __longlong_as_double(long long u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}
inline unsigned long long __double2ull_rz(double x) {
  if (!(x > 0)) return 0;
  if (x >= 18446744073709551616.0) return ~0ull;
  return static_cast<unsigned long long>(x);
}
inline double __ull2double_rn(unsigned long long x) { return static_cast<double>(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned o = *p;
  *p = o + v;
  return o;
}
inline int atomicAdd(int* p, int v) {
  const int o = *p;
  *p = o + v;
  return o;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long o = *p;
  *p = o + v;
  return o;
}
inline double atomicAdd(double* p, double v) {
  const double o = *p;
  *p = o + v;
  return o;
}
inline int atomicMin(int* p, int v) {
  const int o = *p;
  *p = std::min(o, v);
  return o;
}
inline int atomicMax(int* p, int v) {
  const int o = *p;
  *p = std::max(o, v);
  return o;
}
#endif
