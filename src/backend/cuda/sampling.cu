// Token sampling on the device (sampling.h): the CPU sampler's token (src/backend/cpu/sampler.cc) without copying
// logits.
//
// Layout. A cluster of kCluster blocks of 512 threads per row; a grid of at most kMaxSlots clusters walks the rows,
// each cluster with its own scratch slot: s[vocab] (the scaled logits) and list[vocab] (ids in candidate order, for the
// stream path). Block r of a cluster reads slice r of the row (ids [r * per, (r + 1) * per)): every full-row pass
// (penalties, scaling, radix histograms, sums, compactions) runs on eight SMs instead of one. Each block reduces its
// slice in a fixed order, then every block reads the eight partials through distributed shared memory and combines
// them in rank order, so all blocks of the cluster hold the same bits and follow the same control flow; the small
// sequential parts (a sorted tile, the CPU's loops on one thread) run in every block alike. The cluster size is
// fixed, never chosen from the row count: a row's parallel sums (hence its logprobs) do not depend on the batch.
//
// Parity with sampler.cc, step by step:
//  - Penalties: the same fp32 operations per id (__fdiv_rn, __fmul_rn, __fadd_rn, __fsub_rn: no FMA contraction,
//    and the host build has no -march, so no FMA there either), repetition first, then presence/frequency, on the
//    count word of the row's slot read beside each logit; an id a verify row's extras name is recomputed from its raw
//    logit with the combined count, as the CPU penalizes it once; then the biases, in the CPU's order.
//  - Greedy and the "nothing possible" fallback: the first maximum of sane(penalized), as argmax().
//  - Scaled logits: canonical(sane(penalized) / temperature) with IEEE fp32 division. canonical() only turns -0 into
//    +0, which the CPU's comparisons already treat as equal (the weight exp(+-0 - max) is the same); max over them.
//  - Weights: exp(double(s) - double(max)) in double, as weight() in sampler.cc. The one operation that is not the
//    same instruction sequence: CUDA's exp (max error 1 ulp) against glibc's (max error ~0.51 ulp). The two can differ
//    by one ulp; every bound below allows for that, and the only place it could still matter is a weight within one
//    ulp of min_p or a sum that lands within a few ulps of a threshold.
//  - Order: keys (logit descending, id ascending) as 64-bit integers, so "sorted" is the CPU's total order exactly.
//  - The cuts and the draw are sums of doubles in the CPU's order (T1 = the top-p total, the cumulative top-p walk,
//    T2 = the candidate total, the cumulative walk over w / T2). Three ways to get the CPU's decisions:
//      tile:      when the candidates (top-k set, top-p prefix, or min-p survivors) number at most kSamplingTile, they
//                 are gathered into shared memory in the CPU's order and one thread runs the CPU's loops on them:
//                 the same additions, divisions and comparisons in the same order and precision. (Top-p without
//                 top-k: T1 sums the whole vocabulary in id order; it comes in certified, as an interval, and only
//                 when the walk meets that interval does one thread sum it exactly, in id order.)
//      certified: otherwise the cluster sums in parallel (another order) and proves the CPU's decision: for m
//                 nonnegative terms any summation order is within (m - 1) * 2^-53 relative of the exact sum, so
//                 the CPU's sum and ours differ by at most mu = (8 * vocab + 64) * 2^-53 relative (with the 1-ulp exp
//                 difference folded in). A decision "C_k >= target" or "u < C_j" is taken only when it holds for
//                 every pair of values within those bounds; cumulative sums of nonnegative terms are monotone, so
//                 checking the element found and the one before it fixes the CPU's index.
//      stream:    when the bounds cannot decide (u within ~1e-10 of a boundary, or exact ties that land a sum exactly
//                 on the top-p target), one thread runs the CPU's loops over the whole order, a tile at a time (the
//                 sorted order is produced tile by tile by radix select and bitonic sort; for top-p without top-k,
//                 from the weight bins at once, sampling_binned.h's sorted_prefix_by_bins). Slow (milliseconds for
//                 a full vocabulary) and rare.
//    Top-p rows without top-k try a fourth way first, sampling_binned.h: certified decisions on weight bins (one
//    binning pass, the bins at the cut and at the draw gathered and sorted, parallel scans), falling back to the
//    three above whenever its bounds cannot decide; a top-k set that fits a tile is gathered from the same bins
//    instead of two radix selects. DUET_SAMPLING_TOPP=old skips both.
//  - The draw: seeded_uniform(seed, position) ported bit for bit (integer mixing, exact conversion).
//  - Logprobs: log_softmax of the raw logits with max and sum of exp in double (parallel order: the result is within
//    a few ulps of the CPU's, then rounded to float as the CPU does); top-n ids by the same total order as
//    raw_top_logprobs.
#include "backend/cuda/sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/sampling_binned.h"
#include "backend/cuda/sampling_cluster.h"
#include "backend/penalty_counts.h"

namespace duet::backend::cuda {

namespace {

using namespace sampling;

// ---- element sets: a contiguous range of the (value desc, id asc) order, optionally only min-p survivors

struct Spec {
  const float* v = nullptr;  // values (canonical() is applied on reading, so raw logits work too)
  int32_t n = 0;
  double top = 0;   // the maximum scaled logit: weights are exp(v - top)
  uint64_t lo = 0;  // keys in (lo, hi] when use_lo / use_hi
  uint64_t hi = 0;
  bool use_lo = false;
  bool use_hi = false;
  bool filter = false;  // only candidates: w > 0 && w >= min_p
  double min_p = 0;
  double log_min_p = 0;
};

__device__ __forceinline__ bool in_range(const Spec& s, uint32_t d, int32_t i) {
  const uint64_t k = make_key(d, i);
  return !((s.use_lo && k <= s.lo) || (s.use_hi && k > s.hi));
}

// Whether the element (canonical value x, key d, id i) is in s; its weight in w when want_w or s.filter.
__device__ __forceinline__ bool member(const Spec& s, float x, uint32_t d, int32_t i, bool want_w, double& w) {
  w = 0;
  if (!in_range(s, d, i)) return false;
  if (s.filter) {
    bool in = false;
    w = candidate_weight(x, s.top, s.min_p, s.log_min_p, in);
    return in;
  }
  if (want_w) w = weight(x, s.top);
  return true;
}

__device__ __forceinline__ bool crossed(Goal goal, uint32_t count, double w, uint32_t target_count, double target_w) {
  switch (goal) {
    case Goal::count:
      return count >= target_count;
    case Goal::weight_ge:
      return w >= target_w;
    default:
      return w > target_w;
  }
}

// The element of an ordered set where a running count or running weight first reaches a target, with what came
// before it.
struct Hit {
  bool found = false;
  uint32_t d = 0;
  int32_t id = -1;
  uint32_t before_count = 0;  // set members before it
  double before_w = 0;        // their weight (approximate: parallel order)
  double w = 0;               // its weight
};

// ---- id-order scans over the cluster's segments (one per warp, rank-major): segment totals, then the crossing
// segment split over the lanes of one warp.

struct Member {
  bool in;
  double w;
};

// Per segment of the cluster: how many of its elements f admits and their weight, into seg_c / seg_w (every block
// gets every segment's totals).
template <typename F>
__device__ void segment_totals(const float* v, int32_t n, const F& f, Smem& sm) {
  const int lane = lane_id(), wp = warp_id();
  const Slice mine = segment(n, block_rank() * kWarps + wp);
  uint32_t c = 0;
  double w = 0;
  for (int32_t b = mine.begin; b < mine.end; b += 32 * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = b + j * 32 + lane;
      x[j] = i < mine.end ? v[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = b + j * 32 + lane;
      if (i < mine.end) {
        const Member m = f(i, x[j]);
        if (m.in) {
          ++c;
          w += m.w;
        }
      }
    }
  }
  c = warp_sum(c);
  w = warp_sum(w);
  exchange_open();
  if (lane == 0) {
    sm.x_seg_c[wp] = c;
    sm.x_seg_w[wp] = w;
  }
  exchange_publish();
  for (int k = static_cast<int>(threadIdx.x); k < kSegments; k += kThreads) {
    sm.seg_c[k] = at_rank(sm.x_seg_c, k / kWarps)[k % kWarps];
    sm.seg_w[k] = at_rank(sm.x_seg_w, k / kWarps)[k % kWarps];
  }
  exchange_close();
  block_sync();
}

// After segment_totals with the same f: the first admitted element (id order) at which the running count or weight
// crosses the target. Found false when rounding in the three levels disagrees (weights only; callers then fall
// back to the exact stream). Every block finds the same element: the segment walk reads the same totals, and warp 0
// of each block splits the crossing segment (any block can: it reads global memory).
template <typename F>
__device__ Hit find_in_segments(const float* v, int32_t n, const F& f, Goal goal, uint32_t target_count,
                                double target_w, Smem& sm) {
  const int lane = lane_id(), wp = warp_id();
  block_sync();
  if (threadIdx.x == 0) {
    uint32_t c = 0;
    double w = 0;
    int32_t seg_found = -1;
    for (int k = 0; k < kSegments; ++k) {
      const uint32_t nc = c + sm.seg_c[k];
      const double nw = w + sm.seg_w[k];
      if (sm.seg_c[k] > 0 && crossed(goal, nc, nw, target_count, target_w)) {
        seg_found = k;
        break;
      }
      c = nc;
      w = nw;
    }
    sm.bi[1] = seg_found;
    sm.bu[2] = c;
    sm.bd[2] = w;
    sm.bi[2] = -1;
  }
  block_sync();
  const int32_t cw = sm.bi[1];
  if (cw >= 0 && wp == 0) {
    const uint32_t base_c = sm.bu[2];
    const double base_w = sm.bd[2];
    const Slice seg = segment(n, cw);
    const int32_t sub = (seg.end - seg.begin + 31) / 32;
    const int32_t lb = min(seg.end, seg.begin + lane * sub), le = min(seg.end, lb + sub);
    uint32_t lc = 0;
    double lw = 0;
    for (int32_t i = lb; i < le; ++i) {
      const Member m = f(i, v[i]);
      if (m.in) {
        ++lc;
        lw += m.w;
      }
    }
    uint32_t ec = lc;
    double ew = lw;
    warp_exclusive_scan(ec, ew);
    const uint32_t rc0 = base_c + ec;
    const double rw0 = base_w + ew;
    const bool hit = lc > 0 && crossed(goal, rc0 + lc, rw0 + lw, target_count, target_w);
    const unsigned hits = __ballot_sync(kFull, hit);
    if (hits != 0 && lane == __ffs(hits) - 1) {
      uint32_t rc = rc0;
      double rw = rw0;
      for (int32_t i = lb; i < le; ++i) {
        const Member m = f(i, v[i]);
        if (!m.in) continue;
        if (crossed(goal, rc + 1, rw + m.w, target_count, target_w)) {
          sm.bi[2] = i;
          sm.bu[3] = rc;
          sm.bd[3] = rw;
          sm.bd[4] = m.w;
          break;
        }
        ++rc;
        rw += m.w;
      }
    }
  }
  block_sync();
  Hit h;
  h.id = sm.bi[2];
  h.found = h.id >= 0;
  if (h.found) {
    h.before_count = sm.bu[3];
    h.before_w = sm.bd[3];
    h.w = sm.bd[4];
  }
  return h;
}

// After segment_totals with the same f (and at most kSamplingTile members in the cluster): the members in id order
// into every block's tile. Each block compacts its own segments into its x_ tile at their cluster positions; then
// every block copies the ranks' parts.
template <typename F>
__device__ void compact_segments(const float* v, int32_t n, const F& f, Smem& sm) {
  const int lane = lane_id(), wp = warp_id(), rank = block_rank();
  int32_t off = 0;  // this warp's first position in the cluster's order
  for (int k = 0; k < rank * kWarps + wp; ++k) off += static_cast<int32_t>(sm.seg_c[k]);
  const Slice mine = segment(n, rank * kWarps + wp);
  exchange_open();
  for (int32_t b = mine.begin; b < mine.end; b += 32 * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = b + j * 32 + lane;
      x[j] = i < mine.end ? v[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int32_t i = b + j * 32 + lane;
      const Member m = i < mine.end ? f(i, x[j]) : Member{false, 0.0};
      const unsigned ballot = __ballot_sync(kFull, m.in);
      if (m.in) {
        const int32_t pos = off + __popc(ballot & ((1u << lane) - 1u));
        if (pos < kSamplingTile) {
          sm.x_key[pos] = static_cast<uint64_t>(static_cast<uint32_t>(i));
          sm.x_w[pos] = m.w;
        }
      }
      off += __popc(ballot);
    }
  }
  exchange_publish();
  // Rank r wrote positions [first of its segments, first of the next rank's) of its own x_ tile.
  int32_t begin = 0;
  for (int r = 0; r < kCluster; ++r) {
    int32_t end = begin;
    for (int k = r * kWarps; k < (r + 1) * kWarps; ++k) end += static_cast<int32_t>(sm.seg_c[k]);
    end = min(end, kSamplingTile);
    const uint64_t* keys = at_rank(sm.x_key, r);
    const double* ws = at_rank(sm.x_w, r);
    for (int32_t j = begin + static_cast<int32_t>(threadIdx.x); j < end; j += kThreads) {
      sm.key[j] = keys[j];
      sm.w[j] = ws[j];
    }
    begin = end;
  }
  exchange_close();
  block_sync();
}

// ---- radix select over the (value desc, id asc) order

__device__ __noinline__ int32_t nth_in_group(const Spec s, uint32_t d, uint32_t nth, Smem& sm) {
  const auto in_group = [&](int32_t i, float raw) {
    const float x = canonical(raw);
    const uint32_t key = desc_key(x);
    double w = 0;
    return Member{key == d && member(s, x, key, i, false, w), 0.0};
  };
  segment_totals(s.v, s.n, in_group, sm);
  const Hit h = find_in_segments(s.v, s.n, in_group, Goal::count, nth, 0.0, sm);
  return h.found ? h.id : -1;
}

// The first element of s, in (value desc, id asc) order, where the running count reaches target_count (Goal::count:
// the target_count-th element) or the running weight reaches / passes target_w. Four passes of 8-bit digits over the
// value keys; then within the group of equal values (equal weights) the position follows from the count, and its
// id from an id-order scan. Counts are exact; weights are sums in a parallel order (see the certified path).
__device__ __noinline__ Hit radix_select(const Spec s, Goal goal, uint32_t target_count, double target_w, Smem& sm) {
  const bool weighted = goal != Goal::count;
  const int lane = lane_id(), wp = warp_id();
  uint32_t prefix = 0, before_count = 0, bin = 0;
  double before_w = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t high = pass == 0 ? 0u : (~0u << (shift + 8));
    const bool last = pass == 3;
    block_sync();  // the previous pass's readers are done
    for (int j = static_cast<int>(threadIdx.x); j < kBins; j += kThreads) {
      sm.bin_c[j] = 0;
      sm.bin_w[j] = 0;
      sm.bin_min_id[j] = INT32_MAX;
    }
    if (weighted) {
      for (int j = static_cast<int>(threadIdx.x); j < 32 * (kBins + 1); j += kThreads) (&sm.hist_w[0][0])[j] = 0;
    }
    block_sync();
    for_each_value(s.v, s.n, [&](int32_t i, float raw, bool valid) {
      bool take = false;
      uint32_t b = kBins;  // not a bin: lanes that take nothing match each other only
      double w = 0;
      if (valid) {
        const float x = canonical(raw);
        const uint32_t d = desc_key(x);
        if ((d & high) == prefix && member(s, x, d, i, weighted, w)) {
          take = true;
          b = (d >> shift) & 0xffu;
        }
      }
      // Counts: one shared atomic per distinct digit in the warp.
      const unsigned peers = __match_any_sync(kFull, b);
      if (take && lane == __ffs(peers) - 1) {
        atomicAdd(&sm.bin_c[b], static_cast<uint32_t>(__popc(peers)));
        if (last) atomicMin(&sm.bin_min_id[b], i);  // the lowest lane holds the lowest id
      }
      // Weights: shared-memory atomics into this lane's histogram. The order in which a bin's weights are added is not
      // fixed; the certified comparisons already allow any summation order (see the top of the file), and counts
      // stay exact.
      if (weighted && take) atomicAdd(&sm.hist_w[lane][b], w);
    });
    block_sync();
    if (weighted) {
      for (int j = static_cast<int>(threadIdx.x); j < kBins; j += kThreads) {
        double w = 0;
        for (int l = 0; l < 32; ++l) w += sm.hist_w[l][j];
        sm.bin_w[j] = w;
      }
      block_sync();
    }
    // The cluster's bins: every block's, added in rank order.
    exchange_open();
    for (int j = static_cast<int>(threadIdx.x); j < kBins; j += kThreads) {
      sm.x_bin_c[j] = sm.bin_c[j];
      sm.x_bin_w[j] = sm.bin_w[j];
      sm.x_bin_min_id[j] = sm.bin_min_id[j];
    }
    exchange_publish();
    for (int j = static_cast<int>(threadIdx.x); j < kBins; j += kThreads) {
      uint32_t c = 0;
      double w = 0;
      int32_t min_id = INT32_MAX;
      for (int r = 0; r < kCluster; ++r) {
        c += at_rank(sm.x_bin_c, r)[j];
        if (weighted) w += at_rank(sm.x_bin_w, r)[j];
        if (last) min_id = min(min_id, at_rank(sm.x_bin_min_id, r)[j]);
      }
      sm.bin_c[j] = c;
      sm.bin_w[j] = w;
      sm.bin_min_id[j] = min_id;
    }
    exchange_close();
    block_sync();
    if (wp == 0) {
      // Lane l scans bins [8l, 8l + 8) after an exclusive scan of the lanes' totals.
      uint32_t c[8];
      double w[8];
      uint32_t lc = 0;
      double lw = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        c[k] = sm.bin_c[lane * 8 + k];
        w[k] = sm.bin_w[lane * 8 + k];
        lc += c[k];
        lw += w[k];
      }
      uint32_t rc = lc;
      double rw = lw;
      warp_exclusive_scan(rc, rw);
      rc += before_count;
      rw += before_w;
      int hit = -1;
      uint32_t hc = 0;
      double hw = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t nc = rc + c[k];
        const double nw = rw + w[k];
        if (hit < 0 && c[k] > 0 && crossed(goal, nc, nw, target_count, target_w)) {
          hit = k;
          hc = rc;
          hw = rw;
        }
        rc = nc;
        rw = nw;
      }
      const unsigned hits = __ballot_sync(kFull, hit >= 0);
      if (hits == 0) {
        if (lane == 0) sm.bi[0] = 0;
      } else if (lane == __ffs(hits) - 1) {
        sm.bi[0] = 1;
        sm.bu[0] = static_cast<uint32_t>(lane * 8 + hit);
        sm.bu[1] = hc;
        sm.bd[0] = hw;
      }
    }
    block_sync();
    if (sm.bi[0] == 0) return Hit{};
    bin = sm.bu[0];
    prefix |= bin << shift;
    before_count = sm.bu[1];
    before_w = sm.bd[0];
  }
  // The group: every member has the value key_value(prefix), hence the same weight.
  const uint32_t group_count = sm.bin_c[bin];
  const int32_t min_id = sm.bin_min_id[bin];
  const double wg = (weighted || s.filter) ? weight(key_value(prefix), s.top) : 0.0;
  uint32_t nth = 1;
  if (goal == Goal::count) {
    nth = target_count - before_count;
  } else if (wg > 0.0) {
    const double need = (target_w - before_w) / wg;
    double jf = goal == Goal::weight_ge ? ceil(need) : floor(need) + 1.0;
    jf = fmin(fmax(jf, 1.0), static_cast<double>(group_count));
    nth = static_cast<uint32_t>(jf);
    if (nth > 1 && crossed(goal, 0, before_w + static_cast<double>(nth - 1) * wg, 0, target_w)) {
      --nth;
    } else if (nth < group_count && !crossed(goal, 0, before_w + static_cast<double>(nth) * wg, 0, target_w)) {
      ++nth;
    }
  }
  Hit h;
  h.d = prefix;
  h.id = nth == 1 ? min_id : nth_in_group(s, prefix, nth, sm);
  h.found = h.id >= 0 && h.id < s.n;
  h.before_count = before_count + nth - 1;
  h.before_w = before_w + static_cast<double>(nth - 1) * wg;
  h.w = wg;
  return h;
}

// ---- tiles

// The elements of s (at most kSamplingTile in the cluster: the caller bounded s by a count select) into every block's
// tile as keys, sorted in the CPU's order. Returns how many.
__device__ __noinline__ int32_t gather_sorted(const Spec s, Smem& sm) {
  return gather_sorted_if(
      s.v, s.n,
      [&](int32_t i, float x) {
        double w = 0;
        return member(s, x, desc_key(x), i, false, w);
      },
      sm);
}

// sampler.cc from the candidate list on: the min-p filter, total, probability = w / total, and the walk, over tile
// entries [0, len) in order. Thread 0 only.
__device__ int32_t tile_pick(const Smem& sm, int32_t len, double min_p, double u, int32_t none, bool& empty) {
  double total = 0;
  int32_t count = 0, first = -1, last = -1;
  for (int32_t j = 0; j < len; ++j) {
    const double w = sm.w[j];
    if (w > 0.0 && w >= min_p) {
      total += w;
      ++count;
      const int32_t id = key_id(sm.key[j]);
      if (first < 0) first = id;
      last = id;
    }
  }
  if (count == 0) {
    empty = true;
    return none;
  }
  if (count == 1) return first;
  double cumulative = 0;
  for (int32_t j = 0; j < len; ++j) {
    const double w = sm.w[j];
    if (w > 0.0 && w >= min_p) {
      cumulative += w / total;
      if (u < cumulative) return key_id(sm.key[j]);
    }
  }
  return last;  // rounding left the walk short: the last candidate takes the rest
}

// sampler.cc's top-p loop over the first `len` entries of S0 (which has s0 entries), with the target known to lie in
// [lo, hi] (lo == hi when it is the CPU's target exactly). Thread 0 only.
struct KeepResult {
  int32_t keep;
  int32_t status;
};
__device__ KeepResult keep_on_tile(const double* w, int32_t len, int32_t s0, double lo, double hi) {
  double cumulative = 0;
  int32_t keep = 0;
  while (keep < s0) {
    if (keep > 0) {
      if (cumulative >= hi) return {keep, kDecided};      // cumulative >= target for any target in [lo, hi]
      if (!(cumulative < lo)) return {keep, kAmbiguous};  // some targets in [lo, hi] say go on, some stop
    }
    if (keep == len) return {keep, kPastTile};
    cumulative += w[keep];
    ++keep;
  }
  return {keep, kDecided};
}

// ---- one row

struct RowCtx {
  const float* s;  // scaled logits, canonical
  int32_t* list;   // scratch for the sorted stream
  int32_t n;
  double top;  // their maximum
  double u;    // the draw
  int32_t top_k;
  float top_p;
  double min_p;
  double log_min_p;
  int32_t cap;   // tile capacity
  double mu;     // relative bound between our parallel sums and the CPU's sequential ones
  int32_t none;  // the answer when no candidate survives
  bool force_stream;
  bool binned;  // the weight bins may decide (sampling_binned.h)
  int32_t keep_shift;
  int32_t draw_shift;

  __device__ BinnedRow binned_row() const {
    return BinnedRow{s, n, top, u, static_cast<double>(top_p), min_p, cap, mu, keep_shift, draw_shift};
  }
  __device__ Spec all() const {
    Spec b;
    b.v = s;
    b.n = n;
    b.top = top;
    b.min_p = min_p;
    b.log_min_p = log_min_p;
    return b;
  }
};

// Whether the CPU's walk certainly stops at the element with these approximate sums: C_{j-1} <= u < C_j.
__device__ __forceinline__ bool certified_draw(uint32_t before_count, double before_w, double w, double total, double u,
                                               double mu) {
  const bool after_previous = before_count == 0 || (before_w / total) * (1.0 + mu) + kTiny < u;
  const bool before_this = ((before_w + w) / total) * (1.0 - mu) - kTiny > u;
  return after_previous && before_this;
}

// ---- the streams' walks: sampler.cc's loops on one thread, kWalk entries at a time. The entries' loads are all in
// flight at once and the comparisons stay off the chain of additions, which are the CPU's, one after another in its
// order (the same bits); an entry's comparison only decides whether the walk stops there, and the additions past
// that point are dropped. (One entry at a time, each step waited for its load, its add and its compare in turn.)
constexpr int kWalk = 8;

// sampler.cc's top-p loop from position k (cumulative: the sum of the entries before it) over the tile's entries up
// to position end (w[k - pos]: position k's weight): true when it stops (a position past the first whose running sum
// is not below the target), false when it reaches end first. Thread 0 only.
__device__ __forceinline__ bool top_p_walk(const double* w, int32_t pos, int32_t end, double target, int32_t& k,
                                           double& cumulative) {
  for (;;) {
    if (k > 0 && !(cumulative < target)) return true;
    if (k == end) return false;
    const int32_t b = min(kWalk, end - k);
    double x[kWalk];
#pragma unroll
    for (int u = 0; u < kWalk; ++u) x[u] = u < b ? w[k - pos + u] : 0.0;
    double run = cumulative, through = cumulative;
    int32_t took = 0;
    bool reached = false;
#pragma unroll
    for (int u = 0; u < kWalk; ++u) {
      run += x[u];  // past b: +0, and not taken
      if (u < b && !reached) {
        took = u + 1;
        through = run;
        reached = !(run < target);
      }
    }
    k += took;
    cumulative = through;
  }
}

// Every thread: the tile's weights w[0, len) become sampler.cc's probabilities w / total for the candidates (w > 0 &&
// w >= min_p: the same division, hence the same bits, on any thread) and +0 for the others.
__device__ void tile_probabilities(int32_t len, double total, double min_p, Smem& sm) {
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < len; j += kThreads) {
    const double w = sm.w[j];
    sm.w[j] = w > 0.0 && w >= min_p ? w / total : 0.0;
  }
  block_sync();
}

// sampler.cc's draw loop over a tile of probabilities (tile_probabilities) from the running sum `cumulative`: the
// first entry where u < cumulative, -1 when none (cumulative then holds the sum through the tile). Adding a +0 leaves
// the sum's bits alone, and an entry that is not a candidate is never the first where u < cumulative (the candidate
// before it, or the start, would have been), so the CPU's loop over candidates only stops at the same entry. Thread 0
// only.
__device__ __forceinline__ int32_t draw_walk(const double* q, int32_t len, double u, double& cumulative) {
  for (int32_t j = 0; j < len; j += kWalk) {
    double x[kWalk];
#pragma unroll
    for (int t = 0; t < kWalk; ++t) x[t] = j + t < len ? q[j + t] : 0.0;
    double run = cumulative;
    int32_t hit = -1;
#pragma unroll
    for (int t = 0; t < kWalk; ++t) {
      run += x[t];
      if (hit < 0 && u < run) hit = j + t;
    }
    if (hit >= 0) return hit;
    cumulative = run;
  }
  return -1;
}

// The CPU's top-p total over every id in id order, one thread adding as sampler.cc does.
__device__ __noinline__ double exact_t1_by_id(const RowCtx& c, Smem& sm) {
  double* stage = &sm.hist_w[0][0];  // leaves the tile alone
  double total = 0;
  for (int32_t pos = 0; pos < c.n; pos += c.cap) {
    const int32_t len = min(c.cap, c.n - pos);
    block_sync();
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < len; j += kThreads) stage[j] = weight(c.s[pos + j], c.top);
    block_sync();
    if (threadIdx.x == 0) {
      for (int32_t j = 0; j < len; ++j) total += stage[j];
    }
  }
  return bcast_d(total, sm);
}

// Id order (no top-k, no top-p) by the CPU's loops over every id, a tile at a time.
__device__ __noinline__ Pick exact_by_id_stream(const RowCtx& c, Smem& sm) {
  const uint32_t path = kPathStream;
  const auto load = [&](int32_t pos, int32_t len) {
    block_sync();
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < len; j += kThreads) {
      sm.key[j] = static_cast<uint64_t>(pos + j);
      sm.w[j] = weight(c.s[pos + j], c.top);
    }
    block_sync();
  };
  double total = 0;  // thread 0's
  int32_t count = 0, first = -1, last = -1;
  for (int32_t pos = 0; pos < c.n; pos += c.cap) {
    const int32_t len = min(c.cap, c.n - pos);
    load(pos, len);
    if (threadIdx.x == 0) {
      for (int32_t j = 0; j < len; ++j) {
        const double w = sm.w[j];
        if (w > 0.0 && w >= c.min_p) {
          total += w;
          ++count;
          if (first < 0) first = pos + j;
          last = pos + j;
        }
      }
    }
  }
  count = bcast_i(count, sm);
  first = bcast_i(first, sm);
  last = bcast_i(last, sm);
  if (count == 0) return {c.none, path | kPathEmpty};
  if (count == 1) return {first, path};
  total = bcast_d(total, sm);
  double cumulative = 0;
  int32_t picked = -1;
  for (int32_t pos = 0; pos < c.n; pos += c.cap) {
    const int32_t len = min(c.cap, c.n - pos);
    load(pos, len);
    tile_probabilities(len, total, c.min_p, sm);
    if (threadIdx.x == 0) {
      const int32_t j = draw_walk(sm.w, len, c.u, cumulative);
      if (j >= 0) picked = pos + j;
    }
    if (bcast_i(picked, sm) >= 0) break;
  }
  picked = bcast_i(picked, sm);
  return {picked >= 0 ? picked : last, path};
}

// Sorted order by the CPU's loops over S0 itself: S0's order is written to c.list as far as the loops need it. A
// top-p row without top-k gets it from the weight bins at once (sorted_prefix_by_bins: the prefix the top-p walk can
// reach, sorted bin run by bin run); otherwise, and past that prefix, a tile at a time (count select of the next
// tile past the last key, gather, sort).
__device__ __noinline__ Pick exact_sorted_stream(const RowCtx& c, const Spec& in0, int32_t s0, bool topk, bool topp,
                                                 Smem& sm, uint32_t path) {
  path |= kPathSorted | kPathStream;
  int32_t made = 0;   // list[0, made) holds S0's first `made` elements in order
  uint64_t last = 0;  // the key of list[made - 1]
  if (topp && !topk && s0 == c.n && c.binned) {
    made = sorted_prefix_by_bins(c.binned_row(), c.list, sm);
    if (made > 0) {
      const int32_t id = c.list[made - 1];
      last = make_key(desc_key(c.s[id]), id);
      path |= kPathStreamBins;
    }
  }
  const auto load = [&](int32_t pos, int32_t len) {
    while (made < pos + len) {
      const int32_t r = min(c.cap, s0 - made);
      Spec next = in0;
      if (made > 0) {
        next.use_lo = true;
        next.lo = last;
      }
      if (r < s0 - made) {
        const Hit cut = radix_select(next, Goal::count, static_cast<uint32_t>(r), 0.0, sm);
        next.use_hi = true;
        next.hi = make_key(cut.d, cut.id);
      }
      gather_sorted(next, sm);
      for (int32_t j = static_cast<int32_t>(threadIdx.x); j < r; j += kThreads) c.list[made + j] = key_id(sm.key[j]);
      last = sm.key[r - 1];
      made += r;
      block_sync();
    }
    block_sync();
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < len; j += kThreads) {
      const int32_t id = c.list[pos + j];
      sm.key[j] = static_cast<uint64_t>(static_cast<uint32_t>(id));
      sm.w[j] = weight(c.s[id], c.top);
    }
    block_sync();
  };

  int32_t keep = s0;
  if (topp) {
    double t1 = 0;
    if (topk) {  // sampler.cc sums the top-k set in its sorted order
      for (int32_t pos = 0; pos < s0; pos += c.cap) {
        const int32_t len = min(c.cap, s0 - pos);
        load(pos, len);
        if (threadIdx.x == 0) {
          for (int32_t j = 0; j < len; ++j) t1 += sm.w[j];
        }
      }
      t1 = bcast_d(t1, sm);
    } else {
      t1 = exact_t1_by_id(c, sm);
      path |= kPathExactTopP;
    }
    const double target = static_cast<double>(c.top_p) * t1;
    double cumulative = 0;  // thread 0's
    int32_t k = 0;
    for (int32_t pos = 0; pos < s0; pos += c.cap) {
      const int32_t len = min(c.cap, s0 - pos);
      load(pos, len);
      int32_t stop = 0;
      if (threadIdx.x == 0) stop = top_p_walk(sm.w, pos, pos + len, target, k, cumulative) || k == s0 ? 1 : 0;
      keep = bcast_i(k, sm);
      if (bcast_i(stop, sm) != 0) break;
    }
  }

  double total = 0;  // thread 0's
  int32_t count = 0, first = -1, last_id = -1;
  for (int32_t pos = 0; pos < keep; pos += c.cap) {
    const int32_t len = min(c.cap, keep - pos);
    load(pos, len);
    if (threadIdx.x == 0) {
      for (int32_t j = 0; j < len; ++j) {
        const double w = sm.w[j];
        if (w > 0.0 && w >= c.min_p) {
          total += w;
          ++count;
          const int32_t id = key_id(sm.key[j]);
          if (first < 0) first = id;
          last_id = id;
        }
      }
    }
  }
  count = bcast_i(count, sm);
  first = bcast_i(first, sm);
  last_id = bcast_i(last_id, sm);
  if (count == 0) return {c.none, path | kPathEmpty};
  if (count == 1) return {first, path};
  total = bcast_d(total, sm);
  double cumulative = 0;
  int32_t picked = -1;
  for (int32_t pos = 0; pos < keep; pos += c.cap) {
    const int32_t len = min(c.cap, keep - pos);
    load(pos, len);
    tile_probabilities(len, total, c.min_p, sm);
    if (threadIdx.x == 0) {
      const int32_t j = draw_walk(sm.w, len, c.u, cumulative);
      if (j >= 0) picked = key_id(sm.key[j]);
    }
    if (bcast_i(picked, sm) >= 0) break;
  }
  picked = bcast_i(picked, sm);
  return {picked >= 0 ? picked : last_id, path};
}

// No top-k, no top-p: candidates are the min-p survivors in id order.
__device__ __noinline__ Pick sample_by_id(const RowCtx& c, Smem& sm) {
  if (c.force_stream) return exact_by_id_stream(c, sm);
  const double top = c.top, min_p = c.min_p, log_min_p = c.log_min_p;  // registers in the hot loops
  const auto candidate = [=](int32_t, float x) {
    bool in = false;
    const double w = candidate_weight(x, top, min_p, log_min_p, in);
    return Member{in, w};
  };
  segment_totals(c.s, c.n, candidate, sm);
  uint32_t count = 0;
  double total = 0;
  for (int k = 0; k < kSegments; ++k) {
    count += sm.seg_c[k];
    total += sm.seg_w[k];
  }
  if (count == 0) return {c.none, kPathEmpty};
  if (count <= static_cast<uint32_t>(c.cap)) {
    compact_segments(c.s, c.n, candidate, sm);
    bool empty = false;
    int32_t id = 0;
    if (threadIdx.x == 0) id = tile_pick(sm, static_cast<int32_t>(count), c.min_p, c.u, c.none, empty);
    id = bcast_i(id, sm);
    return {id, kPathTile | (bcast_i(empty, sm) ? kPathEmpty : 0u)};
  }
  const Hit e = find_in_segments(c.s, c.n, candidate, Goal::weight_gt, 0, c.u * total, sm);
  if (e.found && certified_draw(e.before_count, e.before_w, e.w, total, c.u, c.mu)) return {e.id, kPathCertified};
  return exact_by_id_stream(c, sm);
}

// Top-k or top-p on: candidates in (value desc, id asc) order.
__device__ __noinline__ Pick sample_sorted(const RowCtx& c, Smem& sm) {
  uint32_t path = kPathSorted;
  const bool topk = c.top_k > 0 && c.top_k < c.n;
  const bool topp = c.top_p < 1.0f;
  // S0: the top-k set, or everything.
  Spec in0 = c.all();
  int32_t s0 = c.n;
  // A top-k set that fits a tile comes from the weight bins, sorted, straight into the tile.
  const bool tiled = topk && c.binned && !c.force_stream && c.top_k <= c.cap && top_k_tile(c.binned_row(), c.top_k, sm);
  if (tiled) {
    in0.use_hi = true;
    in0.hi = sm.key[c.top_k - 1];
    s0 = c.top_k;
    path |= kPathBinned;
  } else if (topk) {
    const Hit k = radix_select(in0, Goal::count, static_cast<uint32_t>(c.top_k), 0.0, sm);
    in0.use_hi = true;
    in0.hi = make_key(k.d, k.id);
    s0 = c.top_k;
  }
  if (c.force_stream) return exact_sorted_stream(c, in0, s0, topk, topp, sm, path);

  // The first g elements of S0, sorted, in the tile.
  const int32_t g = min(s0, c.cap);
  if (!tiled) {
    Spec first = in0;
    if (g < s0) {
      const Hit t = radix_select(in0, Goal::count, static_cast<uint32_t>(g), 0.0, sm);
      first.use_hi = true;
      first.hi = make_key(t.d, t.id);
    }
    gather_sorted(first, sm);
    tile_weights(g, c.top, sm);
  }

  // T1, exactly when S0 is in the tile (sampler.cc sums top-k in sorted order), else with a relative bound.
  double t1 = 0, t1_rel = 0;
  bool t1_exact = false;
  if (topp) {
    if (topk && s0 <= g) {
      double t = 0;
      if (threadIdx.x == 0) {
        for (int32_t j = 0; j < s0; ++j) t += sm.w[j];
      }
      t1 = bcast_d(t, sm);
      t1_exact = true;
    } else {
      double part = 0;
      const Spec range = in0;
      const double top = c.top;
      for_each_value(range.v, range.n, [&](int32_t i, float raw, bool valid) {
        if (!valid) return;
        const float x = canonical(raw);
        if (in_range(range, desc_key(x), i)) part += weight(x, top);
      });
      t1 = cluster_sum(part, sm);
      t1_rel = c.mu;
    }
  }
  const auto target_bounds = [&](double& lo, double& hi) {
    const double target = static_cast<double>(c.top_p) * t1;
    lo = t1_exact ? target : target * (1.0 - t1_rel) - kTiny;
    hi = t1_exact ? target : target * (1.0 + t1_rel) + kTiny;
  };

  int32_t keep = s0;
  bool in_tile = s0 <= g;
  if (topp) {
    int32_t status = kDecided;
    for (;;) {
      double lo = 0, hi = 0;
      target_bounds(lo, hi);
      KeepResult r{0, 0};
      if (threadIdx.x == 0) r = keep_on_tile(sm.w, g, s0, lo, hi);
      keep = bcast_i(r.keep, sm);
      status = bcast_i(r.status, sm);
      if (status == kAmbiguous && !t1_exact && !topk) {
        t1 = exact_t1_by_id(c, sm);  // sampler.cc's id-order sum, then the same walk again
        t1_exact = true;
        path |= kPathExactTopP;
        continue;
      }
      break;
    }
    if (status == kAmbiguous) return exact_sorted_stream(c, in0, s0, topk, topp, sm, path);
    in_tile = status == kDecided;
  }
  if (in_tile) {
    bool empty = false;
    int32_t id = 0;
    if (threadIdx.x == 0) id = tile_pick(sm, keep, c.min_p, c.u, c.none, empty);
    id = bcast_i(id, sm);
    return {id, path | kPathTile | (bcast_i(empty, sm) ? kPathEmpty : 0u)};
  }

  // Past the tile: certified cuts on parallel sums.
  Spec in1 = in0;  // S1: the top-p prefix of S0
  if (topp) {
    double lo = 0, hi = 0;
    target_bounds(lo, hi);
    const Hit k = radix_select(in0, Goal::weight_ge, 0, static_cast<double>(c.top_p) * t1, sm);
    const bool ok = k.found && (k.before_count == 0 || k.before_w * (1.0 + c.mu) + kTiny < lo) &&
                    (k.before_w + k.w) * (1.0 - c.mu) - kTiny >= hi;
    if (!ok) return exact_sorted_stream(c, in0, s0, topk, topp, sm, path);
    in1.use_hi = true;
    in1.hi = make_key(k.d, k.id);
    path |= kPathCertified;
  }
  Spec in2 = in1;  // the candidates
  in2.filter = true;
  uint32_t count = 0;
  double part = 0;
  uint64_t first_key = kNoKey;
  for_each_value(in2.v, in2.n, [&](int32_t i, float raw, bool valid) {
    if (!valid) return;
    const float x = canonical(raw);
    const uint32_t d = desc_key(x);
    double w = 0;
    if (!member(in2, x, d, i, true, w)) return;
    ++count;
    part += w;
    const uint64_t k = make_key(d, i);
    first_key = k < first_key ? k : first_key;
  });
  count = cluster_sum(count, sm);
  const double total = cluster_sum(part, sm);
  first_key = cluster_min(first_key, sm);
  if (count == 0) return {c.none, path | kPathEmpty};
  if (count == 1) return {key_id(first_key), path};

  // All candidates inside the tile (min-p cut them down): the CPU's loops on the tile, up to S1's end.
  int32_t in_s1 = 0, in_tile_count = 0;
  if (threadIdx.x == 0) {
    for (int32_t j = 0; j < g; ++j) {
      if (in1.use_hi && sm.key[j] > in1.hi) break;
      ++in_s1;
      const double w = sm.w[j];
      if (w > 0.0 && w >= c.min_p) ++in_tile_count;
    }
  }
  in_s1 = bcast_i(in_s1, sm);
  in_tile_count = bcast_i(in_tile_count, sm);
  if (static_cast<uint32_t>(in_tile_count) == count) {
    bool empty = false;
    int32_t id = 0;
    if (threadIdx.x == 0) id = tile_pick(sm, in_s1, c.min_p, c.u, c.none, empty);
    id = bcast_i(id, sm);
    return {id, path | kPathTile};
  }

  const Hit e = radix_select(in2, Goal::weight_gt, 0, c.u * total, sm);
  if (e.found && certified_draw(e.before_count, e.before_w, e.w, total, c.u, c.mu)) {
    return {e.id, path | kPathCertified};
  }
  return exact_sorted_stream(c, in0, s0, topk, topp, sm, path);
}

// This block's part of sum(exp(x - m)) over the row's raw logits (m: their finite maximum), for log-sum-exp. The
// weights by bins' series and table (sampling_cluster.h: within 2^-40 of exp), which do not depend on one another, so
// kUnroll of them are in flight; weights below 2^-1000 are left out (they cannot move a sum of at least 1).
__device__ __noinline__ double exp_sum_part(const float* v, int32_t n, float m, Smem& sm) {
  block_sync();  // bin_scale may still be read by the binned path
  if (threadIdx.x < kBinsPerHalving)
    sm.bin_scale[threadIdx.x] = exp2(-static_cast<double>(threadIdx.x) / kBinsPerHalving);
  block_sync();
  const double top = static_cast<double>(m);
  double part = 0;
  for_each_value(v, n, [&](int32_t, float x, bool valid) {
    const double d = __dsub_rn(static_cast<double>(sane(x)), top);
    const double t = -d * kBinScale;
    if (valid && t < 64000.0) {
      const int j = static_cast<int>(t);
      part += scaled_bin_weight(d, j, sm.bin_scale) * pow2(-(j >> 6));
    }
  });
  return part;
}

struct Args {
  const float* logits;
  int32_t rows;
  int32_t vocab;
  const SamplingRowParams* params;
  PenaltyTables tables;
  const uint32_t* masks;
  DeviceSample* out;
  DeviceTopLogprob* top;
  char* scratch;
  size_t slot_bytes;
  size_t list_offset;
  int32_t cap;
  bool flip_draw;
  bool force_stream;
  bool binned;  // top-p and small top-k rows try the weight bins first (sampling_binned.h)
  int32_t keep_shift;
  int32_t draw_shift;
};

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Whether a row's mask (null: none) leaves id i drawable (sampler.cc step 2c).
__device__ __forceinline__ bool allowed_by(const uint32_t* mask, const SamplingRowParams& p, int32_t i) {
  if (mask == nullptr) return true;
  const int32_t word = i >> 5;
  return word < p.mask_words && ((mask[word] >> (i & 31)) & 1u) != 0u;
}

// Steps 1 and 2 of sampler.cc (penalize) on one logit: the same fp32 operations, no FMA contraction.
__device__ __forceinline__ float penalize(float x, const SamplingRowParams& p, bool seen, uint32_t generated) {
  if (p.repetition_penalty != 1.0f && (seen || generated > 0u))
    x = x > 0.0f ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
  if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && generated > 0u)
    x = __fsub_rn(x, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(generated)), p.presence_penalty));
  return x;
}

__device__ void sample_row(int32_t row, const Args& a, Smem& sm) {
  const uint64_t began = threadIdx.x == 0 && block_rank() == 0 ? global_ns() : 0;
  const SamplingRowParams p = a.params[row];
  const int32_t n = a.vocab;
  const float* raw = a.logits + static_cast<int64_t>(row) * n;
  char* slot = a.scratch + static_cast<size_t>(blockIdx.x / kCluster) * a.slot_bytes;  // the cluster's slot
  float* s = reinterpret_cast<float*>(slot);
  int32_t* list = reinterpret_cast<int32_t*>(slot + a.list_offset);

  // Penalties, then logit_bias (sampler.cc penalized_logits), on a copy in s: each block its slice. The slot's count
  // words are read beside the logits in the pass that copies them; a verify row's extra ids and the biases then
  // correct the few ids they name.
  const bool greedy = p.temperature <= 0.0f;
  const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const uint32_t* words = penalties && p.counts_slot >= 0 && a.tables.counts != nullptr
                              ? a.tables.counts + static_cast<int64_t>(p.counts_slot) * n
                              : nullptr;
  const int32_t* extras = penalties && p.extra_count > 0 ? a.tables.extra_ids + p.extra_offset : nullptr;
  const BiasEntry* biases = p.bias_count > 0 ? a.tables.biases + p.bias_offset : nullptr;
  const float* penalized = raw;
  // A masked row's disallowed ids are -inf from the start: the penalties keep -inf (-inf / r, -inf * r, -inf - x,
  // -inf + bias), so this equals the CPU's mask applied after them.
  const uint32_t* mask = p.mask_offset >= 0 && a.masks != nullptr ? a.masks + p.mask_offset : nullptr;
  if (words != nullptr || extras != nullptr || biases != nullptr || mask != nullptr) {
    for_each_value(raw, n, [&](int32_t i, float x, bool valid) {
      if (!valid) return;
      if (!allowed_by(mask, p, i)) x = -INFINITY;
      if (words != nullptr) {
        const uint32_t w = words[i];
        if (w != 0u) x = penalize(x, p, true, w & kCountsGenerated);
      }
      s[i] = x;
    });
    block_sync();
    const Slice mine = rank_slice(n, block_rank());
    // Extras: an id's first occurrence recomputes its logit from the raw one with the combined count (the slot's
    // generated plus every occurrence among the extras), exactly the CPU's one penalty per id; later occurrences skip.
    for (int32_t e = static_cast<int32_t>(threadIdx.x); extras != nullptr && e < p.extra_count; e += kThreads) {
      const int32_t id = extras[e];
      if (id < mine.begin || id >= mine.end) continue;  // another block's (or outside [0, n): skipped)
      bool first = true;
      uint32_t more = 0;
      for (int32_t f = 0; f < p.extra_count; ++f) {
        if (extras[f] != id) continue;
        first = first && f >= e;
        ++more;
      }
      if (!first) continue;
      const uint32_t w = words != nullptr ? words[id] : 0u;
      s[id] = penalize(allowed_by(mask, p, id) ? raw[id] : -INFINITY, p, w != 0u, (w & kCountsGenerated) + more);
    }
    block_sync();
    // Biases in the CPU's order: an id's first entry adds its own and every later entry's for the same id.
    for (int32_t b = static_cast<int32_t>(threadIdx.x); biases != nullptr && b < p.bias_count; b += kThreads) {
      const int32_t id = biases[b].id;
      if (id < mine.begin || id >= mine.end) continue;
      bool first = true;
      for (int32_t f = 0; f < b && first; ++f) first = biases[f].id != id;
      if (!first) continue;
      float x = s[id];
      for (int32_t f = b; f < p.bias_count; ++f)
        if (biases[f].id == id) x = __fadd_rn(x, biases[f].bias);
      s[id] = x;
    }
    block_sync();
    penalized = s;
  }

  // The argmax of the penalized logits (greedy, and the CPU's fallback), and the scaled logits with their maximum.
  float best = -INFINITY, top = -INFINITY;
  int32_t best_id = INT32_MAX;
  for_each_value(penalized, n, [&](int32_t i, float x, bool valid) {
    if (!valid) return;
    const float v = sane(x);
    take_better(best, best_id, v, i);
    if (!greedy) {
      const float scaled = canonical(__fdiv_rn(v, p.temperature));
      s[i] = scaled;  // in place when penalized == s: each element read and written by the same thread
      top = fmaxf(top, scaled);
    }
  });
  cluster_argmax(best, best_id, sm);
  if (!greedy) top = cluster_max(top, sm);  // the cluster barriers also publish s to the other blocks

  Pick pick{best_id, greedy ? kPathGreedy : kPathNoFinite};
  if (!greedy && top != -INFINITY) {
    RowCtx c;
    c.s = s;
    c.list = list;
    c.n = n;
    c.top = static_cast<double>(top);
    c.u = seeded_uniform(p.seed, p.position);
    if (a.flip_draw) c.u = 1.0 - c.u;
    c.top_k = p.top_k;
    c.top_p = p.top_p;
    c.min_p = static_cast<double>(p.min_p);
    c.log_min_p = p.min_p > 0.0f ? log(c.min_p) : 0.0;
    c.cap = a.cap;
    c.mu = (8.0 * static_cast<double>(n) + 64.0) * kEps;
    c.none = best_id;
    c.force_stream = a.force_stream;
    c.binned = a.binned && isfinite(top);
    c.keep_shift = a.keep_shift;
    c.draw_shift = a.draw_shift;
    const bool topk = p.top_k > 0 && p.top_k < n;
    const bool topp = p.top_p < 1.0f;
    pick.path = 0;
    if (topp && !topk && c.binned && !c.force_stream) pick = sample_top_p_binned(c.binned_row(), sm);
    if (pick.path == 0) pick = topk || topp ? sample_sorted(c, sm) : sample_by_id(c, sm);
  }

  // Logprobs of the raw logits (sampler.cc raw_logprob / raw_top_logprobs).
  float logprob = __int_as_float(0x7fc00000);  // NaN: not asked
  int32_t top_count = 0;
  if (p.top_logprobs >= 0) {
    double lse = -INFINITY;
    if (a.binned) {
      // log-sum-exp: the raw maximum (pass 1's when it read the raw logits), then one pass of independent weights.
      float max_all = best;
      if (penalized != raw) {
        float m = -INFINITY;
        for_each_value(raw, n, [&](int32_t, float x, bool valid) {
          if (valid) m = fmaxf(m, sane(x));
        });
        max_all = cluster_max(m, sm);
      }
      if (max_all == INFINITY) {
        lse = __longlong_as_double(0x7ff8000000000000ll);  // as sampler.cc: exp(inf - inf) makes the sum NaN
      } else if (max_all != -INFINITY) {
        lse = static_cast<double>(max_all) + log(cluster_sum(exp_sum_part(raw, n, max_all, sm), sm));
      }
    } else {
      // As before the weight bins (DUET_SAMPLING_TOPP=old): a running maximum per thread, then one rescale per thread.
      float m = -INFINITY;
      double sum = 0;
      for_each_value(raw, n, [&](int32_t, float x, bool valid) {
        if (!valid) return;
        x = sane(x);
        if (x == -INFINITY) return;
        if (x > m) {
          sum = sum * exp(static_cast<double>(m) - static_cast<double>(x)) + 1.0;
          m = x;
        } else {
          sum += exp(static_cast<double>(x) - static_cast<double>(m));
        }
      });
      const float max_all = cluster_max(m, sm);
      const double part = m == -INFINITY ? 0.0 : sum * exp(static_cast<double>(m) - static_cast<double>(max_all));
      const double total = cluster_sum(part, sm);
      lse = max_all == -INFINITY ? -INFINITY : static_cast<double>(max_all) + log(total);
    }
    logprob = static_cast<float>(static_cast<double>(sane(raw[pick.id])) - lse);
    top_count = min(min(p.top_logprobs, kMaxTopLogprobs), n);
    if (top_count > 0) {
      Spec rs;
      rs.v = raw;
      rs.n = n;
      if (top_count < n) {
        const Hit h = radix_select(rs, Goal::count, static_cast<uint32_t>(top_count), 0.0, sm);
        rs.use_hi = true;
        rs.hi = make_key(h.d, h.id);
      }
      gather_sorted(rs, sm);
      if (a.top != nullptr && block_rank() == 0) {
        DeviceTopLogprob* out = a.top + static_cast<int64_t>(row) * kMaxTopLogprobs;
        for (int32_t j = static_cast<int32_t>(threadIdx.x); j < kMaxTopLogprobs; j += kThreads) {
          DeviceTopLogprob t;
          if (j < top_count) {
            t.id = key_id(sm.key[j]);
            t.logprob = static_cast<float>(static_cast<double>(key_value(key_d(sm.key[j]))) - lse);
          }
          out[j] = t;
        }
      }
    }
  }
  if (top_count == 0 && a.top != nullptr && block_rank() == 0) {
    DeviceTopLogprob* out = a.top + static_cast<int64_t>(row) * kMaxTopLogprobs;
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < kMaxTopLogprobs; j += kThreads) out[j] = DeviceTopLogprob{};
  }
  if (threadIdx.x == 0 && block_rank() == 0) {
    DeviceSample o;
    o.id = pick.id;
    o.logprob = logprob;
    o.top_count = top_count;
    o.path = pick.path;
    o.ns = static_cast<uint32_t>(min(global_ns() - began, static_cast<uint64_t>(UINT32_MAX)));
    a.out[row] = o;
  }
}

__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, 1) sample_kernel(const Args a) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  cluster_arrive();  // see the exchange protocol
  const int32_t clusters = static_cast<int32_t>(gridDim.x) / kCluster;
  for (int32_t row = static_cast<int32_t>(blockIdx.x) / kCluster; row < a.rows; row += clusters) {
    sample_row(row, a, sm);
    // The next row rewrites the slot's s and list, which other blocks may still be reading (the stream paths read
    // the whole row after the last exchange): a full cluster barrier, then the protocol's pending arrive again.
    cluster_wait();
    cluster_arrive();
    cluster_wait();
    cluster_arrive();
    block_sync();
  }
  cluster_wait();  // no block leaves while another may still read its shared memory
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }
size_t slot_bytes(int32_t vocab) { return 2 * align256(static_cast<size_t>(vocab) * sizeof(float)); }

void refuse(const char* what) { check_cuda(cudaErrorInvalidValue, what); }

// DUET_SAMPLING_TOPP=old: the kernel as it was before the weight bins (top-p and top-k rows by the radix path alone,
// log-sum-exp with a running maximum), to compare the two on one machine.
bool old_top_p_asked() {
  static const bool old = [] {
    const char* value = std::getenv("DUET_SAMPLING_TOPP");
    return value != nullptr && std::string_view(value) == "old";
  }();
  return old;
}

#ifdef DUET_SAMPLING_TRACE
// The hang locator's slots (sampling_trace.h): host-mapped, one per thread of the largest grid, zeroed before each
// launch so that a stuck launch's record is its own.
SamplingTraceSlot* trace_slots() {
  static SamplingTraceSlot* slots = [] {
    void* host = nullptr;
    check_cuda(cudaHostAlloc(&host, sizeof(SamplingTraceSlot) * kMaxSlots * kCluster * kThreads, cudaHostAllocMapped),
               "sampling trace: cudaHostAlloc");
    void* device = nullptr;
    check_cuda(cudaHostGetDevicePointer(&device, host, 0), "sampling trace: cudaHostGetDevicePointer");
    check_cuda(cudaMemcpyToSymbol(g_trace, &device, sizeof(device)), "sampling trace: cudaMemcpyToSymbol");
    return static_cast<SamplingTraceSlot*>(host);
  }();
  return slots;
}
#endif

}  // namespace

#ifdef DUET_SAMPLING_TRACE
void print_sampling_trace(int32_t clusters) {
  const volatile SamplingTraceSlot* slots = trace_slots();
  for (int32_t b = 0; b < clusters * kCluster; ++b) {
    // Threads grouped by (sync line, cluster line and kind, entered, cluster ops): a stuck block shows one group per
    // place its threads wait.
    struct Group {
      SamplingTraceSlot at;
      int first, count;
    };
    Group groups[kThreads];
    int n = 0;
    for (int t = 0; t < kThreads; ++t) {
      const volatile SamplingTraceSlot& v = slots[b * kThreads + t];
      const SamplingTraceSlot at{v.sync_line, v.cluster_line, v.entered, v.cluster_ops};
      int g = 0;
      while (g < n && std::memcmp(&groups[g].at, &at, sizeof(at)) != 0) ++g;
      if (g == n) groups[n++] = Group{at, t, 0};
      ++groups[g].count;
    }
    for (int g = 0; g < n; ++g) {
      const SamplingTraceSlot& at = groups[g].at;
      const char* kind = (at.cluster_line & kSamplingTraceWait)     ? "wait"
                         : (at.cluster_line & kSamplingTraceArrive) ? "arrive"
                                                                    : "-";
      std::fprintf(stdout,
                   "trace: block %d (cluster %d rank %d): %d threads from %d: last block_sync at line %u, last "
                   "cluster %s at line %u, %u barriers entered, %u cluster halves\n",
                   b, b / kCluster, b % kCluster, groups[g].count, groups[g].first, at.sync_line, kind,
                   at.cluster_line & 0x3fffffffu, at.entered, at.cluster_ops);
    }
  }
  std::fflush(stdout);
}
#endif

size_t sampling_scratch_bytes(int32_t rows, int32_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return static_cast<size_t>(std::min(rows, kMaxSlots)) * slot_bytes(vocab);
}

void launch_sample(const float* logits, int32_t rows, int32_t vocab, const SamplingRowParams* params,
                   const PenaltyTables& tables, DeviceSample* out, DeviceTopLogprob* top, void* scratch,
                   size_t scratch_bytes, cudaStream_t stream, const SamplingTestHooks& hooks, const uint32_t* masks) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > (1 << 30)) refuse("launch_sample: vocab must be in [1, 2^30]");
  if (logits == nullptr || params == nullptr || out == nullptr) refuse("launch_sample: null logits, params or out");
  if (scratch == nullptr || scratch_bytes < sampling_scratch_bytes(rows, vocab)) {
    refuse("launch_sample: scratch smaller than sampling_scratch_bytes(rows, vocab)");
  }
  if ((reinterpret_cast<uintptr_t>(scratch) & 255u) != 0) refuse("launch_sample: scratch is not 256-byte aligned");
  if (hooks.tile_cap < 0 || hooks.tile_cap > kSamplingTile) refuse("launch_sample: tile_cap outside [0, 2048]");
  if (tables.counts != nullptr && tables.counts_vocab != vocab)
    refuse("launch_sample: penalty counts of another vocabulary than the logits'");
  Args a;
  a.logits = logits;
  a.rows = rows;
  a.vocab = vocab;
  a.params = params;
  a.tables = tables;
  a.masks = masks;
  a.out = out;
  a.top = top;
  a.scratch = static_cast<char*>(scratch);
  a.slot_bytes = slot_bytes(vocab);
  a.list_offset = align256(static_cast<size_t>(vocab) * sizeof(float));
  a.cap = hooks.tile_cap == 0 ? kSamplingTile : hooks.tile_cap;
  a.flip_draw = hooks.flip_draw;
  a.force_stream = hooks.force_stream;
  a.binned = !hooks.old_top_p && !old_top_p_asked();
  a.keep_shift = hooks.binned_keep_shift;
  a.draw_shift = hooks.binned_draw_shift;
  const size_t smem = sizeof(Smem);
  check_cuda(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
             "launch_sample: cudaFuncSetAttribute");
  const unsigned grid = static_cast<unsigned>(std::min(rows, kMaxSlots) * kCluster);
#ifdef DUET_SAMPLING_TRACE
  check_cuda(cudaStreamSynchronize(stream), "sampling trace: cudaStreamSynchronize");
  std::memset(trace_slots(), 0, sizeof(SamplingTraceSlot) * grid * kThreads);
#endif
  launch_dependent("sample_kernel", sample_kernel, grid, kThreads, smem, stream, a);
  check_launch("launch_sample");
}

}  // namespace duet::backend::cuda
