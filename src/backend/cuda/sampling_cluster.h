#pragma once
// The sampling kernel's common pieces (sampling.cu): the cluster's layout and shared memory, the exchange protocol
// between its blocks, values and their order keys, the weights, the seeded draw, the reductions every path uses, and
// sorted tiles. The paths that decide a row are in sampling.cu (radix select, tiles, streams) and sampling_binned.h
// (top-p by weight bins). Device code for sampling.cu only: one translation unit holds the whole kernel.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/sampling.h"
#include "backend/cuda/sampling_trace.h"

namespace duet::backend::cuda::sampling {

namespace cg = cooperative_groups;

constexpr int kCluster = 8;  // blocks per row: the portable cluster size (every Hopper GPC holds 8 co-scheduled SMs)
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;   // radix digit: 8 bits
constexpr int kUnroll = 16;  // loads in flight per thread in full-row passes (bytes in flight set a row's pass time)
constexpr int32_t kMaxSlots = 128;            // clusters in the grid (rows beyond share their scratch slots in turn)
constexpr int kSegments = kCluster * kWarps;  // id-order scans: one segment per warp of the cluster, rank-major
constexpr unsigned kFull = 0xffffffffu;
constexpr double kEps = 0x1.0p-53;  // unit roundoff of double
// Absolute slack in certified comparisons: covers subnormal weights and probabilities, whose errors are not relative.
constexpr double kTiny = 1e-290;
constexpr uint64_t kNoKey = ~0ull;

// Statuses of the top-p walk on a tile.
constexpr int kDecided = 0, kAmbiguous = 1, kPastTile = 2;

enum class Goal : int { count, weight_ge, weight_gt };

// A row's token and how it was decided (SamplingPath bits; 0: not decided, another path must run).
struct Pick {
  int32_t id;
  uint32_t path;
};

struct ArgBest {
  float v;
  int32_t id;
};

// The binned path (sampling_binned.h) bins every element by its weight: kBinsPerHalving bins per halving, bin 0 holding
// the weights in (2^(-1/64), 1], the last bin everything lighter than the bins before it (and the impossible ids).
// Block r of the cluster owns bins [r * kThreads, (r + 1) * kThreads) when they are combined: one per thread.
constexpr int kWeightBins = kCluster * kThreads;
constexpr int kBinsPerHalving = 64;

// A block's histogram: weights as fixed-point integers (exact sums in any order: the bins do not depend on
// scheduling), counts, and the min-p candidates' count and weight.
struct BinHistogram {
  unsigned long long w[kWeightBins];
  uint32_t c[kWeightBins];
  double candidate_w;
  uint32_t candidates;
};
// A block's share of the cluster's bins: exclusive prefix sums over the bins it owns, and their totals.
struct OwnedBins {
  double before_w[kThreads];
  uint32_t before_c[kThreads];
  double total_w;
  uint32_t total_c;
};
// The cluster's bins, in every block: before_w[j] approximates the weight of all elements of bins below j (in the
// CPU's order: the elements before bin j's first one), before_c[j] counts them exactly; entry kWeightBins is the total.
struct BinPrefix {
  double before_w[kWeightBins + 1];
  uint32_t before_c[kWeightBins + 1];
};

struct Smem {
  uint64_t key[kSamplingTile];  // a tile: keys (value desc, id asc) or plain ids in the low 32 bits
  double w[kSamplingTile];      // the tile's weights
  // Per-lane radix histograms of weights (lane l of every warp adds into hist_w[l]: the lanes of a warp never contend
  // for one address, which on a concentrated digit would serialize 32 atomic updates); rows padded by one so that the
  // lanes' rows start on different banks. Also the staging area of exact_t1_by_id.
  union {
    double hist_w[32][kBins + 1];
    BinPrefix bins;  // the binned path's cluster-wide bins (sampling_binned.h); never in use with hist_w
  };
  double bin_scale[kBinsPerHalving];  // the binned path's fixed-point scales: 2^(q - k/64)
  double bin_w[kBins];                // radix bins: this block's, then (after the exchange) the cluster's totals
  uint32_t bin_c[kBins];
  int32_t bin_min_id[kBins];
  double seg_w[kSegments];  // per-segment totals of the whole cluster (segment_totals)
  uint32_t seg_c[kSegments];
  double red_d[kWarps];
  float red_f[kWarps];
  int32_t red_i[kWarps];
  uint32_t red_u[kWarps];
  uint64_t red_k[kWarps];
  int32_t counter;
  int32_t bi[8];
  uint32_t bu[8];
  double bd[8];
  // What the other blocks of the cluster read (the exchange protocol below): written only between exchange_open and
  // exchange_publish.
  double x_d;
  float x_f;
  uint32_t x_u;
  uint64_t x_k;
  ArgBest x_best;
  int32_t x_count;
  double x_seg_w[kWarps];
  uint32_t x_seg_c[kWarps];
  double x_bin_w[kBins];
  uint32_t x_bin_c[kBins];
  int32_t x_bin_min_id[kBins];
  uint64_t x_key[kSamplingTile];  // this block's part of a gathered tile
  double x_w[kSamplingTile];
  union {  // the binned path's exchanges: this block's histogram, then its share of the cluster's bins
    BinHistogram x_hist;
    OwnedBins x_owned;
    // The stream path's order by bins (sampling_binned.h, sorted_prefix_by_bins), only while its own exchanges are
    // open: the block's slot counters per bin, then its sort buffer (two tiles).
    uint32_t x_slot[kWeightBins];
    uint64_t x_sort[2 * kSamplingTile];
  };
};
// build_bins publishes x_owned after x_hist, and sorted_prefix_by_bins reads the ranks' counts (x_hist.c) after both.
static_assert(sizeof(OwnedBins) <= offsetof(BinHistogram, c), "x_owned must leave the histogram's counts intact");
static_assert(32 * (kBins + 1) >= kSamplingTile, "exact_t1_by_id stages a tile in hist_w");
static_assert(kSamplingTile >= kMaxTopLogprobs, "the top logprobs are gathered into one tile");
static_assert(sizeof(Smem) <= 227 * 1024, "more shared memory than an H200 block may have");

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & 31; }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) >> 5; }
__device__ __forceinline__ int block_rank() { return static_cast<int>(cg::this_cluster().block_rank()); }

// ---- the cluster: slices and the exchange protocol

// A contiguous id range.
struct Slice {
  int32_t begin;
  int32_t end;
};
// Block `rank`'s slice of a row of n: whole warps of ids, in rank order.
__device__ __forceinline__ Slice rank_slice(int32_t n, int rank) {
  const int32_t per = ((n + kCluster - 1) / kCluster + 31) / 32 * 32;
  const int32_t begin = min(n, rank * per);
  return {begin, min(n, begin + per)};
}
// Segment k (rank k / kWarps, warp k % kWarps) of the id-order scans: warp-sized pieces of its rank's slice.
__device__ __forceinline__ Slice segment(int32_t n, int k) {
  const Slice b = rank_slice(n, k / kWarps);
  const int32_t per_warp = ((b.end - b.begin + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int32_t begin = min(b.end, b.begin + (k % kWarps) * per_warp);
  return {begin, min(b.end, begin + per_warp)};
}

// Another block's copy of a shared-memory field.
template <typename T>
__device__ __forceinline__ T* at_rank(T* p, int rank) {
  return cg::this_cluster().map_shared_rank(p, rank);
}

// The exchange protocol, on the cluster barrier's two halves (arrive: release, wait: acquire). Every thread of every
// block runs the same sequence, so each arrive is matched by one wait:
//   exchange_open()      wait: every block has finished reading the previous exchange (it arrived after reading)
//   write the x_ fields
//   exchange_publish()   arrive + wait: every block has written
//   read other blocks' x_ fields (at_rank)
//   exchange_close()     arrive: done reading; the next exchange_open waits for everyone's
// The kernel arrives once at its start (so the first open finds the phase complete, and no block touches another's
// shared memory before all have started) and waits once at its end (so no block exits while another still reads it).
// The block barrier of the whole kernel: barrier.sync without .aligned, which (unlike __syncthreads, bar.sync, which
// is .aligned) does not require the threads of a warp to reach it converged. On the H200 a warp could arrive at the
// __syncthreads after gather_sorted_if's exchange_close still diverged from the per-thread copy loop before it (the
// cluster barrier halves are inline PTX, no point of convergence to the compiler): compute-sanitizer --tool synccheck
// reported "Divergent thread(s) in warp" there, and the kernel hung on 512-wide rows in one build and not in another
// (__syncwarp around the cluster halves did not help). Every thread of the block still reaches every block_sync.
__device__ __forceinline__ void block_sync(int line = __builtin_LINE()) {
#ifdef DUET_SAMPLING_TRACE
  trace_sync_site(line);
#endif
  asm volatile("barrier.sync 0;\n" ::: "memory");
}

// `line`: the caller's, for the hang locator (sampling_trace.h); unused otherwise.
__device__ __forceinline__ void cluster_arrive(int line = __builtin_LINE()) {
#ifdef DUET_SAMPLING_TRACE
  trace_cluster_site(line, kSamplingTraceArrive);
#endif
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait(int line = __builtin_LINE()) {
#ifdef DUET_SAMPLING_TRACE
  trace_cluster_site(line, kSamplingTraceWait);
#endif
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void exchange_open(int line = __builtin_LINE()) { cluster_wait(line); }
__device__ __forceinline__ void exchange_publish(int line = __builtin_LINE()) {
  cluster_arrive(line);
  cluster_wait(line);
}
__device__ __forceinline__ void exchange_close(int line = __builtin_LINE()) { cluster_arrive(line); }

// One value per block (thread 0's), combined over the ranks in rank order: the same bits on every thread of the
// cluster.
template <typename T, typename Op>
__device__ T cluster_combine(T mine, T* slot, Op op) {
  exchange_open();
  if (threadIdx.x == 0) *slot = mine;
  exchange_publish();
  T t = *at_rank(slot, 0);
#pragma unroll
  for (int r = 1; r < kCluster; ++r) t = op(t, *at_rank(slot, r));
  exchange_close();
  return t;
}

// ---- values, keys, weights

// sampler.cc's sane(): NaN is impossible (-inf).
__device__ __forceinline__ float sane(float x) { return isnan(x) ? -INFINITY : x; }
// sane() and -0 -> +0, so that values the CPU compares equal get equal keys.
__device__ __forceinline__ float canonical(float x) {
  x = sane(x);
  return x == 0.0f ? 0.0f : x;
}
// An order key of a canonical value: smaller key = larger value.
__device__ __forceinline__ uint32_t desc_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t d) {
  return __uint_as_float((d & 0x80000000u) ? d : (~d & 0x7fffffffu));
}
// (value desc, id asc) as one integer: the CPU's more_likely() order.
__device__ __forceinline__ uint64_t make_key(uint32_t d, int32_t id) {
  return (static_cast<uint64_t>(d) << 32) | static_cast<uint32_t>(id);
}
__device__ __forceinline__ uint32_t key_d(uint64_t k) { return static_cast<uint32_t>(k >> 32); }
__device__ __forceinline__ int32_t key_id(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }

// sampler.cc's weight(): exp(double(logit) - max_logit). Below -760 both exps return +0; skipping the call there only
// saves time.
__device__ __forceinline__ double weight(float s, double top) {
  const double d = __dsub_rn(static_cast<double>(s), top);
  return d < -760.0 ? 0.0 : exp(d);
}

// The weight and whether it survives min-p (w > 0 && w >= min_p, as sampler.cc). Weights certainly below min_p skip
// the exp: exp(d) < min_p * e^-0.01 whatever the last-ulp behaviour of either exp.
__device__ __forceinline__ double candidate_weight(float s, double top, double min_p, double log_min_p, bool& in) {
  const double d = __dsub_rn(static_cast<double>(s), top);
  if (min_p > 0.0 && d < log_min_p - 0.01) {
    in = false;
    return 0.0;
  }
  const double w = d < -760.0 ? 0.0 : exp(d);
  in = w > 0.0 && w >= min_p;
  return w;
}

// ---- weights by bins (sampling_binned.h, and the logprobs' log-sum-exp)

static_assert(kBinsPerHalving == 64, "bin_shift divides by 64 with a shift");
static_assert(kWeightBins == kCluster * kThreads, "each thread of the cluster owns one bin");
constexpr double kBinScale = kBinsPerHalving * 1.4426950408889634;  // bins per unit of log weight: 64 log2(e)

// 2^e for -1022 <= e <= 1023: scaling by it is exact.
__device__ __forceinline__ double pow2(int e) { return __longlong_as_double(static_cast<long long>(1023 + e) << 52); }

// The bin of an element of weight exp(d), d = s - top <= 0 (-inf for an impossible id): floor(-d * 64 log2 e), or the
// last bin for everything lighter. Monotone in s: a bin is a contiguous run of the CPU's order, ties in one bin.
__device__ __forceinline__ int weight_bin(double d) {
  const double t = -d * kBinScale;
  return t >= static_cast<double>(kWeightBins - 1) ? kWeightBins - 1 : static_cast<int>(t);
}

// Bin j's fixed point: its weights are at most 2^(-j/64) (to rounding), so w * 2^(q + floor(j/64)) stays within
// 2^q (1 + 2^-40), and n of them below 2^64 with q = 63 - bit_length(n). Truncation loses less than 2^-q of a weight
// that is at least 2^-(floor(j/64) + 1): relative 2^-(q-1). The last bin's weights can be far lighter, but every sum
// compared holds the heaviest element (weight 1), so their absolute error (n * 2^-(q+63)) stays negligible.
__device__ __forceinline__ int bin_shift(int q, int j) { return q + (j >> 6); }

constexpr double kLn2Over64 = 0.010830424696249145;  // ln(2) / 64: a bin's width in log weight
// Relative error of scaled_bin_weight against the exact exp(d), for j < kWeightBins: the reduced argument's (the
// product j ln2/64 is fused; the constant's error times j leaves < 4e-15), the series' truncation (|r|^6 / 720 <
// 3e-15) and a few roundings, well inside this. (Up to j = 64000, as the log-sum-exp goes, it stays below 2^-40.)
constexpr double kBinWeightError = 0x1.0p-44;

// exp(d) for an element of bin j < kWeightBins - 1, times 2^(q + floor(j/64)): exp(r) 2^(-(j mod 64)/64) 2^q with
// r = d + j ln2/64 in (-ln2/64, 0], exp(r) by five terms of its series, 2^(q - k/64) from the table. No exp call:
// five fused multiply-adds and a table read instead of a full exp (most of the pass's arithmetic).
__device__ __forceinline__ double scaled_bin_weight(double d, int j, const double* scale) {
  const double r = fma(static_cast<double>(j), kLn2Over64, d);
  const double e = fma(r, fma(r, fma(r, fma(r, fma(r, 1.0 / 120, 1.0 / 24), 1.0 / 6), 0.5), 1.0), 1.0);
  return e * scale[j & (kBinsPerHalving - 1)];
}

// ---- the draw: backend/seeded_draw.h, ported (integer mixing; the conversion of a 53-bit integer is exact)
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
__device__ __forceinline__ double seeded_uniform(uint64_t seed, int64_t position) {
  const uint64_t bits = mix64(mix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// ---- warp and block reductions. Every thread calls them and gets the same bits (the warp butterflies add
// commutatively, the block step sums the warp results in one fixed order on every thread).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// The sums of (count, weight) over the lanes before this one, added in lane order (lane 0 gets zeros): where each
// lane's run starts in a scan that walks the lanes' runs one after another.
__device__ __forceinline__ void warp_exclusive_scan(uint32_t& count, double& weight) {
  const int lane = lane_id();
  uint32_t ic = count;
  double iw = weight;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t tc = __shfl_up_sync(kFull, ic, o);
    const double tw = __shfl_up_sync(kFull, iw, o);
    if (lane >= o) {
      ic += tc;
      iw += tw;
    }
  }
  count = __shfl_up_sync(kFull, ic, 1);
  weight = __shfl_up_sync(kFull, iw, 1);
  if (lane == 0) {
    count = 0;
    weight = 0;
  }
}

__device__ double block_sum(double v, Smem& sm) {
  v = warp_sum(v);
  block_sync();  // red_d may still be read by a previous reduction
  if (lane_id() == 0) sm.red_d[warp_id()] = v;
  block_sync();
  double t = 0;
  for (int k = 0; k < kWarps; ++k) t += sm.red_d[k];
  return t;
}

__device__ uint32_t block_sum(uint32_t v, Smem& sm) {
  v = warp_sum(v);
  block_sync();
  if (lane_id() == 0) sm.red_u[warp_id()] = v;
  block_sync();
  uint32_t t = 0;
  for (int k = 0; k < kWarps; ++k) t += sm.red_u[k];
  return t;
}

__device__ float block_max(float v, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  block_sync();
  if (lane_id() == 0) sm.red_f[warp_id()] = v;
  block_sync();
  float t = sm.red_f[0];
  for (int k = 1; k < kWarps; ++k) t = fmaxf(t, sm.red_f[k]);
  return t;
}

__device__ uint64_t block_min(uint64_t v, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(kFull, v, o);
    v = other < v ? other : v;
  }
  block_sync();
  if (lane_id() == 0) sm.red_k[warp_id()] = v;
  block_sync();
  uint64_t t = sm.red_k[0];
  for (int k = 1; k < kWarps; ++k) t = sm.red_k[k] < t ? sm.red_k[k] : t;
  return t;
}

// (value, id): larger value first, then lower id: a total order, so the result does not depend on the tree.
__device__ __forceinline__ void take_better(float& v, int32_t& id, float ov, int32_t oid) {
  if (ov > v || (ov == v && oid < id)) {
    v = ov;
    id = oid;
  }
}
__device__ void block_argmax(float& v, int32_t& id, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int32_t oid = __shfl_xor_sync(kFull, id, o);
    take_better(v, id, ov, oid);
  }
  block_sync();
  if (lane_id() == 0) {
    sm.red_f[warp_id()] = v;
    sm.red_i[warp_id()] = id;
  }
  block_sync();
  v = sm.red_f[0];
  id = sm.red_i[0];
  for (int k = 1; k < kWarps; ++k) take_better(v, id, sm.red_f[k], sm.red_i[k]);
}

// The cluster-wide reductions: the block's result, then the ranks' results in rank order.
__device__ double cluster_sum(double v, Smem& sm) {
  return cluster_combine(block_sum(v, sm), &sm.x_d, [](double a, double b) { return a + b; });
}
__device__ uint32_t cluster_sum(uint32_t v, Smem& sm) {
  return cluster_combine(block_sum(v, sm), &sm.x_u, [](uint32_t a, uint32_t b) { return a + b; });
}
__device__ float cluster_max(float v, Smem& sm) {
  return cluster_combine(block_max(v, sm), &sm.x_f, [](float a, float b) { return fmaxf(a, b); });
}
__device__ uint64_t cluster_min(uint64_t v, Smem& sm) {
  return cluster_combine(block_min(v, sm), &sm.x_k, [](uint64_t a, uint64_t b) { return b < a ? b : a; });
}
__device__ void cluster_argmax(float& v, int32_t& id, Smem& sm) {
  block_argmax(v, id, sm);
  const ArgBest best = cluster_combine(ArgBest{v, id}, &sm.x_best, [](ArgBest a, ArgBest b) {
    take_better(a.v, a.id, b.v, b.id);
    return a;
  });
  v = best.v;
  id = best.id;
}

// Thread 0's value to every thread.
__device__ int32_t bcast_i(int32_t v, Smem& sm) {
  block_sync();
  if (threadIdx.x == 0) sm.bi[7] = v;
  block_sync();
  return sm.bi[7];
}
__device__ double bcast_d(double v, Smem& sm) {
  block_sync();
  if (threadIdx.x == 0) sm.bd[7] = v;
  block_sync();
  return sm.bd[7];
}

// f(i, v[i], valid) for every i of this block's slice of [0, n), kUnroll loads in flight per thread. Every lane of
// every warp makes the same number of calls (valid false past the slice), so f may use warp-wide intrinsics.
template <typename F>
__device__ __forceinline__ void for_each_value(const float* v, int32_t n, F&& f) {
  const Slice mine = rank_slice(n, block_rank());
  for (int32_t base = mine.begin; base < mine.end; base += kThreads * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = base + j * kThreads + static_cast<int32_t>(threadIdx.x);
      x[j] = i < mine.end ? v[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = base + j * kThreads + static_cast<int32_t>(threadIdx.x);
      f(i, x[j], i < mine.end);
    }
  }
}

// ---- tiles

// a[0, size) ascending; size a power of two.
__device__ void bitonic_sort(uint64_t* a, int32_t size) {
  for (int32_t k = 2; k <= size; k <<= 1) {
    for (int32_t j = k >> 1; j > 0; j >>= 1) {
      for (int32_t i = static_cast<int32_t>(threadIdx.x); i < size; i += kThreads) {
        const int32_t p = i ^ j;
        if (p > i) {
          const uint64_t x = a[i], y = a[p];
          const bool up = (i & k) == 0;
          if ((x > y) == up) {
            a[i] = y;
            a[p] = x;
          }
        }
      }
      block_sync();
    }
  }
}

// The elements i of v[0, n) with in(i, x) (x = canonical(v[i])), at most kSamplingTile in the cluster (callers bound
// them first), into every block's tile as keys, sorted in the CPU's order. Returns how many. Each block gathers its
// slice's members into its x_ tile (in any order: the keys are distinct, and the sort fixes the order), then copies
// every rank's.
template <typename In>
__device__ __forceinline__ int32_t gather_sorted_if(const float* v, int32_t n, const In& in, Smem& sm) {
  block_sync();
  if (threadIdx.x == 0) sm.counter = 0;
  block_sync();
  const int lane = lane_id();
  exchange_open();
  for_each_value(v, n, [&](int32_t i, float raw, bool valid) {
    const float x = canonical(raw);
    const bool member = valid && in(i, x);
    // One atomic per warp, not per element: the members of a warp take consecutive slots.
    const unsigned ballot = __ballot_sync(kFull, member);
    if (ballot == 0) return;
    const int leader = __ffs(ballot) - 1;
    int32_t base = 0;
    if (lane == leader) base = atomicAdd(&sm.counter, __popc(ballot));
    base = __shfl_sync(kFull, base, leader);
    const int32_t slot = base + __popc(ballot & ((1u << lane) - 1u));
    if (member && slot < kSamplingTile) sm.x_key[slot] = make_key(desc_key(x), i);
  });
  block_sync();
  if (threadIdx.x == 0) sm.x_count = min(sm.counter, kSamplingTile);
  exchange_publish();
  int32_t count = 0;
  for (int r = 0; r < kCluster; ++r) {
    const int32_t part = min(*at_rank(&sm.x_count, r), kSamplingTile - count);
    const uint64_t* keys = at_rank(sm.x_key, r);
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < part; j += kThreads) sm.key[count + j] = keys[j];
    count += part;
  }
  exchange_close();
  block_sync();
  int32_t size = 1;
  while (size < count) size <<= 1;
  for (int32_t j = count + static_cast<int32_t>(threadIdx.x); j < size; j += kThreads) sm.key[j] = kNoKey;
  block_sync();
  bitonic_sort(sm.key, size);
  return count;
}

// The tile's weights from its keys.
__device__ void tile_weights(int32_t count, double top, Smem& sm) {
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < count; j += kThreads) {
    sm.w[j] = weight(key_value(key_d(sm.key[j])), top);
  }
  block_sync();
}

}  // namespace duet::backend::cuda::sampling
