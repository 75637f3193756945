#pragma once
// Top-p without top-k by weight bins: sampling.cu tries this path first and hands the row to the radix-select path
// (tile, certified, stream) whenever it cannot prove the CPU's answer. The same bins also gather a small top-k set
// for the radix path's tile logic (top_k_tile, at the end). DUET_SAMPLING_TOPP=old skips both.
//
// Why. On a flat row (a random checkpoint's, or any wide nucleus) the top-p prefix holds about half the vocabulary.
// The radix path found its cut and the draw with three radix selects of four 8-bit passes each (weighted ones adding
// doubles into shared memory by atomics), plus sequential walks of 2048-entry tiles on one thread: 16 passes over the
// row and most of a millisecond, with the cluster's SMs waiting at barriers.
//
// How. Every decision the CPU takes on the sorted order is "the first position where a running sum of weights crosses
// a target" (the top-p cut at top_p * T1, then the draw at u * T2), and the weights fall with the position. So:
//  1. One pass bins every element by its weight, 64 bins per halving (bin j: weights near 2^(-j/64)), counting the
//     elements and adding their weights as fixed-point integers scaled per bin (relative precision 2^-(q-1), q = 63 -
//     bit_length(vocab): integer sums are exact in any order, so the bins do not depend on scheduling), and the min-p
//     candidates' count and weight. A weight there is a short series around its bin's edge times a table entry, not
//     an exp call; weights below 2^-63 are only counted. Both errors are bounded and folded into mu. Each bin is a
//     contiguous run of the CPU's order (values descending, ties by id), since the bin index is monotone in the value.
//     The cluster combines the bins: each block owns 512, adds the ranks' counts and weights, scans them; every block
//     then holds, for every bin j, the exact count and an approximate weight of all elements before the bin.
//  2. T1 is the grand total (the CPU's id-order sum, to a known relative bound). The bins whose boundaries could
//     straddle the cut under the bounds are gathered (usually one bin: a few hundred elements on a flat row), sorted
//     into a tile, and scanned in parallel from the weight before them. The cut is the tile entry at which the CPU's
//     sum certainly reaches the target while the sum before it certainly does not (the certified comparisons of
//     sampling.cu, with the bins' error added to mu).
//  3. T2 is the running sum at the cut (or the min-p candidates' total when min-p stops first). The draw's bin is found
//     the same way, gathered unless it is already in the tile, and the drawn entry certified the same way.
// Three passes over the row instead of sixteen, two sorts of at most kSamplingTile keys, no sequential walk. When a
// bound cannot decide (a sum within about 1e-10 relative of a target, exact ties on it), or a bin run holds more than
// a tile (ties in the thousands; at 248,320 ids, scaled logits flatter than a normal of sigma 0.5), nothing is decided
// here and the radix path starts over: the answer is the CPU's either way.
#include <climits>
#include <cstdint>

#include "backend/cuda/sampling_cluster.h"

namespace duet::backend::cuda::sampling {

// One top-p row, as sample_row scaled it.
struct BinnedRow {
  const float* s;  // scaled logits, canonical
  int32_t n;
  double top;  // their maximum, finite
  double u;    // the draw
  double top_p;
  double min_p;
  int32_t cap;         // tile capacity
  double mu;           // the radix path's bound between parallel and sequential sums (sampling.cu)
  int32_t keep_shift;  // planted faults (SamplingTestHooks): the cut and the drawn entry moved by this many
  int32_t draw_shift;
};

struct Candidates {
  uint32_t count;  // elements with w > 0 && w >= min_p (the CPU's candidates, when top-p does not stop first)
  double w;        // their weight, summed in parallel (to the bins' bound)
};

// Pass 1 of the header comment: every block bins its slice, then the cluster's bins go into sm.bins in every block.
// Weights of the last bin (below 2^-63 each) are left out of the sums; n of them change no sum compared by more than
// n 2^-63 relative (each such sum holds the heaviest element, weight 1), and the bound says so.
__device__ __noinline__ Candidates build_bins(const BinnedRow r, int q, Smem& sm) {
  const int tid = static_cast<int>(threadIdx.x), lane = lane_id(), wp = warp_id();
  exchange_open();
  for (int j = tid; j < kWeightBins; j += kThreads) {
    sm.x_hist.w[j] = 0;
    sm.x_hist.c[j] = 0;
  }
  if (tid < kBinsPerHalving)
    sm.bin_scale[tid] = exp2(static_cast<double>(q) - tid / static_cast<double>(kBinsPerHalving));
  block_sync();
  const double top = r.top, min_p = r.min_p;
  const double min_p_hi = min_p * (1.0 + 0x1.0p-40), min_p_lo = min_p * (1.0 - 0x1.0p-40);
  const double unscale = pow2(-q);
  uint32_t count = 0;
  double cw = 0;
  const Slice mine = rank_slice(r.n, block_rank());
  for (int32_t base = mine.begin; base < mine.end; base += kThreads * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int32_t i = base + k * kThreads + tid;
      x[k] = i < mine.end ? r.s[i] : -INFINITY;
    }
    // The bins and weights of all kUnroll elements first (independent arithmetic in flight), then the updates.
    int bin[kUnroll];
    unsigned long long fixed[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int32_t i = base + k * kThreads + tid;
      const double d = __dsub_rn(static_cast<double>(x[k]), top);
      bin[k] = i < mine.end ? weight_bin(d) : -1;
      fixed[k] = 0;
      bool in = false;
      if (bin[k] >= 0 && bin[k] < kWeightBins - 1) {
        const double scaled = scaled_bin_weight(d, bin[k], sm.bin_scale);
        fixed[k] = __double2ull_rz(scaled);
        const double w = scaled * unscale * pow2(-(bin[k] >> 6));  // exp(d) within kBinWeightError
        // min-p on the exact weight (as the radix path: CUDA's exp standing in for the host's) only near the edge.
        in = w >= min_p_hi || (w >= min_p_lo && exp(d) >= min_p);
        if (in) {
          ++count;
          cw += w;
        }
      } else if (bin[k] == kWeightBins - 1) {
        // Weights below 2^-63: candidates only under a smaller min_p; w > 0 is certain above d = -744.
        if (min_p <= 0x1.0p-63) {
          const bool positive = d > -744.0 || (d >= -760.0 && exp(d) > 0.0);
          in = positive && (min_p == 0.0 || exp(d) >= min_p);
        }
        if (in) ++count;
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int j = bin[k];
      // A warp whose 32 elements share a bin (ties, or the lightest bin) adds once: 32 updates of one address would
      // run one after another.
      const int j0 = __shfl_sync(kFull, j, 0);
      if (__all_sync(kFull, j == j0)) {
        const unsigned long long sum = warp_sum(fixed[k]);
        if (lane == 0 && j0 >= 0) {
          atomicAdd(&sm.x_hist.c[j0], 32u);
          if (sum != 0) atomicAdd(&sm.x_hist.w[j0], sum);
        }
      } else if (j >= 0) {
        atomicAdd(&sm.x_hist.c[j], 1u);
        if (fixed[k] != 0) atomicAdd(&sm.x_hist.w[j], fixed[k]);
      }
    }
  }
  count = block_sum(count, sm);
  cw = block_sum(cw, sm);
  if (tid == 0) {
    sm.x_hist.candidates = count;
    sm.x_hist.candidate_w = cw;
  }
  exchange_publish();
  // This block's bins: the ranks' counts and fixed-point weights added (exactly), and the candidates in rank order.
  const int j = block_rank() * kThreads + tid;
  uint32_t c = 0;
  unsigned long long wf = 0;
  Candidates cand{0, 0.0};
  for (int r2 = 0; r2 < kCluster; ++r2) {
    c += at_rank(sm.x_hist.c, r2)[j];
    wf += at_rank(sm.x_hist.w, r2)[j];
    cand.count += *at_rank(&sm.x_hist.candidates, r2);
    cand.w += *at_rank(&sm.x_hist.candidate_w, r2);
  }
  exchange_close();
  const double v = __ull2double_rn(wf) * pow2(-bin_shift(q, j));
  // Exclusive prefix sums over the block's bins in a fixed tree (lanes, then warps in order), and the block's totals.
  uint32_t ec = c;
  double ev = v;
  warp_exclusive_scan(ec, ev);
  block_sync();  // red_u / red_d may still be read by block_sum
  if (lane == 31) {
    sm.red_u[wp] = ec + c;
    sm.red_d[wp] = ev + v;
  }
  block_sync();
  uint32_t bc = 0, tc = 0;
  double bw = 0, tw = 0;
  for (int k = 0; k < kWarps; ++k) {
    if (k < wp) {
      bc += sm.red_u[k];
      bw += sm.red_d[k];
    }
    tc += sm.red_u[k];
    tw += sm.red_d[k];
  }
  exchange_open();
  sm.x_owned.before_w[tid] = bw + ev;
  sm.x_owned.before_c[tid] = bc + ec;
  if (tid == 0) {
    sm.x_owned.total_w = tw;
    sm.x_owned.total_c = tc;
  }
  exchange_publish();
  // Every block: the owners' prefixes offset by the totals of the ranks before them, added in rank order.
  double base_w = 0;
  uint32_t base_c = 0;
  for (int k = 0; k < kCluster; ++k) {
    sm.bins.before_w[k * kThreads + tid] = base_w + at_rank(sm.x_owned.before_w, k)[tid];
    sm.bins.before_c[k * kThreads + tid] = base_c + at_rank(sm.x_owned.before_c, k)[tid];
    base_w += *at_rank(&sm.x_owned.total_w, k);
    base_c += *at_rank(&sm.x_owned.total_c, k);
  }
  if (tid == 0) {
    sm.bins.before_w[kWeightBins] = base_w;
    sm.bins.before_c[kWeightBins] = base_c;
  }
  exchange_close();
  block_sync();
  return cand;
}

// [first, last]: the bins where possible(j) holds (first = -1 when none). Every thread gets the same answer.
template <typename F>
__device__ __forceinline__ void bin_range(const F& possible, int& first, int& last, Smem& sm) {
  block_sync();
  if (threadIdx.x == 0) {
    sm.bi[5] = INT_MAX;
    sm.bi[6] = -1;
  }
  block_sync();
  int lo = INT_MAX, hi = -1;
  for (int j = static_cast<int>(threadIdx.x); j < kWeightBins; j += kThreads) {
    if (possible(j)) {
      lo = min(lo, j);
      hi = max(hi, j);
    }
  }
  if (hi >= 0) {
    atomicMin(&sm.bi[5], lo);
    atomicMax(&sm.bi[6], hi);
  }
  block_sync();
  first = sm.bi[5] == INT_MAX ? -1 : sm.bi[5];
  last = sm.bi[6];
}

// The first tile entry t in [0, len) where ok(t) holds, -1 when none. Every thread gets the same answer.
template <typename Ok>
__device__ __forceinline__ int32_t first_where(int32_t len, const Ok& ok, Smem& sm) {
  block_sync();
  if (threadIdx.x == 0) sm.bi[5] = INT_MAX;
  block_sync();
  for (int32_t t = static_cast<int32_t>(threadIdx.x); t < len; t += kThreads) {
    if (ok(t)) {
      atomicMin(&sm.bi[5], t);
      break;  // this thread's later entries come after t
    }
  }
  block_sync();
  return sm.bi[5] == INT_MAX ? -1 : sm.bi[5];
}

// sm.w[0, len), the tile's weights in the CPU's order, becomes base + their running sums: sm.w[t] approximates the
// weight of every element up to tile entry t. A fixed tree (each thread a run of consecutive entries, then warps in
// order), so every block gets the same bits; nonnegative terms, so the rounding is within (len + 64) 2^-53 relative.
__device__ void tile_prefix(double base, int32_t len, Smem& sm) {
  const int tid = static_cast<int>(threadIdx.x), lane = lane_id(), wp = warp_id();
  const int32_t per = (len + kThreads - 1) / kThreads;
  const int32_t b = min(len, tid * per), e = min(len, b + per);
  double own = 0;
  for (int32_t t = b; t < e; ++t) own += sm.w[t];
  uint32_t unused = 0;
  double before = own;
  warp_exclusive_scan(unused, before);
  block_sync();  // red_d may still be read
  if (lane == 31) sm.red_d[wp] = before + own;
  block_sync();
  double run = base;
  for (int k = 0; k < wp; ++k) run += sm.red_d[k];
  run += before;
  for (int32_t t = b; t < e; ++t) {
    run += sm.w[t];
    sm.w[t] = run;
  }
  block_sync();
}

// Bins [a, b] (len elements: the bins' count) sorted into the tile with their weights. False when the gather does
// not find the bins' count (it cannot: the same arithmetic binned them).
__device__ __noinline__ bool gather_bins(const BinnedRow r, int a, int b, int32_t len, Smem& sm) {
  const double top = r.top;
  const int32_t got = gather_sorted_if(
      r.s, r.n,
      [=](int32_t, float x) {
        const int j = weight_bin(__dsub_rn(static_cast<double>(x), top));
        return j >= a && j <= b;
      },
      sm);
  if (got != len) return false;
  tile_weights(len, r.top, sm);
  return true;
}

// gather_bins, then the tile's running sums from base (the weight before bin a).
__device__ bool load_bins(const BinnedRow r, int a, int b, int32_t len, double base, Smem& sm) {
  if (!gather_bins(r, a, b, len, sm)) return false;
  tile_prefix(base, len, sm);
  return true;
}

// Top-k's set (the first k positions of the CPU's order, k <= cap) sorted into tile entries [0, k) with their weights,
// for the radix path's tile logic to go on from: the bins up to the one holding position k - 1 are gathered, which
// replaces two radix selects of four passes each. False when those bins hold more than a tile (ties or a dense bin
// at the k-th value): the radix path selects instead.
__device__ __noinline__ bool top_k_tile(const BinnedRow r, int32_t k, Smem& sm) {
  build_bins(r, 63 - (32 - __clz(r.n)), sm);
  const uint32_t* before_c = sm.bins.before_c;
  if (before_c[kWeightBins] != static_cast<uint32_t>(r.n)) return false;
  int a = -1, b = -1;
  bin_range(
      [&](int j) { return before_c[j] < static_cast<uint32_t>(k) && before_c[j + 1] >= static_cast<uint32_t>(k); }, a,
      b, sm);
  if (a < 0) return false;
  const int32_t len = static_cast<int32_t>(before_c[a + 1]);
  return len <= r.cap && gather_bins(r, 0, a, len, sm);
}

// The stream path's order (sampling.cu, exact_sorted_stream) for a top-p row without top-k, from the weight bins at
// once instead of a radix select per tile: list[0, made) becomes the first `made` positions of the CPU's order (value
// desc, id asc), and made is returned (0: nothing usable, list untouched in meaning; the caller produces the order
// tile by tile as before, and goes on that way from `made` when its walks need more).
//  - The prefix: through the bin where the running sum certainly reaches top_p times the bins' total (by a margin of
//    2^-20 relative, far beyond the bins' bounds: the margin only costs a little more sorting, and a prefix too short
//    only falls back to the tile-by-tile order), rounded up to whole walk tiles (the walk loads tiles of `cap`).
//  - Chunks: chunk k holds the bins whose first position lies in [k cap, (k + 1) cap); bins are contiguous runs of the
//    order, so a chunk is one too, and sorting each chunk on its own sorts the prefix. The prefix stops inside the
//    first chunk wider than two tiles (ties in the thousands, or the lightest bin's everything below 2^-63), at its
//    last bin boundary within two tiles of its start.
//  - Scatter: each element of the prefix's bins goes to list[before_c[bin] + the lower ranks' counts in the bin (from
//    build_bins' histograms) + a shared-memory counter]: its bin's run, in no particular order.
//  - Sort: block r sorts chunks r, r + kCluster, ... by key (bitonic, in its x_sort) and writes the ids back.
// Three exchanges after build_bins: the ranks' counts, the scatter (whose publish also publishes list, in global
// memory, as the cluster barrier's release / acquire order every access of the cluster's threads, as for the scaled
// logits), the sort. Every block computes the same bins, chunks and checks, so all take the same branches.
__device__ __noinline__ int32_t sorted_prefix_by_bins(const BinnedRow r, int32_t* list, Smem& sm) {
  constexpr int kPer = kWeightBins / kThreads;  // bins per thread in the per-bin loops: j = m * kThreads + tid
  const int tid = static_cast<int>(threadIdx.x), lane = lane_id(), rank = block_rank();
  build_bins(r, 63 - (32 - __clz(r.n)), sm);
  const uint32_t* before_c = sm.bins.before_c;
  const double* before_w = sm.bins.before_w;
  const uint32_t n = static_cast<uint32_t>(r.n), cap = static_cast<uint32_t>(r.cap);
  if (before_c[kWeightBins] != n) return 0;
  // Where chunk k starts: the first bin boundary at or after k cap (n past the end).
  const auto chunk_start = [&](uint32_t k) -> uint32_t {
    const uint64_t at = static_cast<uint64_t>(k) * cap;
    if (at >= n) return n;
    int lo = 0, hi = kWeightBins;  // before_c[hi] = n >= at
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (before_c[mid] >= at) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return before_c[lo];
  };
  const double margin = 0x1.0p-20;
  const double goal = r.top_p * before_w[kWeightBins] * (1.0 + margin);
  int cut_bin = -1, unused = -1;
  bin_range([&](int j) { return before_w[j + 1] * (1.0 - margin) >= goal; }, cut_bin, unused, sm);
  const uint32_t need = cut_bin < 0 ? n : before_c[cut_bin + 1];
  const int32_t chunks = static_cast<int32_t>((need + cap - 1) / cap);
  const int32_t wide = first_where(
      chunks,
      [&](int32_t k) {
        return chunk_start(static_cast<uint32_t>(k) + 1) - chunk_start(static_cast<uint32_t>(k)) > 2 * cap;
      },
      sm);
  // The prefix: the chunks before the first wide one, and of that one the bins that fit in two tiles.
  const int32_t sorted_chunks = wide < 0 ? chunks : wide + 1;
  uint32_t made = n;
  if (wide < 0) {
    made = chunk_start(static_cast<uint32_t>(chunks));
  } else {
    const uint64_t at = static_cast<uint64_t>(chunk_start(static_cast<uint32_t>(wide))) + 2 * cap;
    int lo = 0, hi = kWeightBins;  // the last bin boundary at or before `at` (before_c[0] = 0)
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (before_c[mid] <= at) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    made = before_c[lo];
  }
  if (made == 0) return 0;

  // Each of this thread's bins: where this block's elements start in it, and how many it has.
  uint32_t first[kPer], own[kPer];
  exchange_open();
  exchange_publish();
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int j = m * kThreads + tid;
    uint32_t before = 0;
    for (int r2 = 0; r2 < rank; ++r2) before += at_rank(sm.x_hist.c, r2)[j];
    first[m] = before_c[j] + before;
    own[m] = sm.x_hist.c[j];
  }
  exchange_close();

  exchange_open();
#pragma unroll
  for (int m = 0; m < kPer; ++m) sm.x_slot[m * kThreads + tid] = first[m];
  block_sync();
  const double top = r.top;
  for_each_value(r.s, r.n, [&](int32_t i, float x, bool valid) {
    int j = -1;
    if (valid) {
      j = weight_bin(__dsub_rn(static_cast<double>(x), top));  // build_bins' arithmetic: the same bin
      if (before_c[j] >= made) j = -1;
    }
    // One shared atomic per distinct bin in the warp.
    const unsigned peers = __match_any_sync(kFull, j);
    const int leader = __ffs(peers) - 1;
    uint32_t base = 0;
    if (j >= 0 && lane == leader) base = atomicAdd(&sm.x_slot[j], static_cast<uint32_t>(__popc(peers)));
    base = __shfl_sync(kFull, base, leader);
    const uint32_t slot = base + static_cast<uint32_t>(__popc(peers & ((1u << lane) - 1u)));
    if (j >= 0 && slot < made) list[slot] = i;
  });
  block_sync();
  // Every bin of the prefix got exactly this block's count (it cannot differ: build_bins counted the same bins), so
  // every position of list[0, made) was written once.
  uint32_t bad = 0;
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int j = m * kThreads + tid;
    if (before_c[j] < made && sm.x_slot[j] != first[m] + own[m]) bad = 1;
  }
  bad = block_sum(bad, sm);
  if (tid == 0) sm.x_u = bad;
  exchange_publish();
  bad = 0;
  for (int r2 = 0; r2 < kCluster; ++r2) bad += *at_rank(&sm.x_u, r2);
  exchange_close();
  if (bad != 0) return 0;

  exchange_open();
  for (int32_t k = rank; k < sorted_chunks; k += kCluster) {
    const uint32_t a = chunk_start(static_cast<uint32_t>(k));
    const uint32_t len = min(chunk_start(static_cast<uint32_t>(k) + 1), made) - a;
    if (len < 2) continue;
    uint32_t size = 1;
    while (size < len) size <<= 1;
    block_sync();  // the previous chunk's ids are written
    for (uint32_t t = static_cast<uint32_t>(tid); t < size; t += kThreads) {
      uint64_t key = kNoKey;
      if (t < len) {
        const int32_t id = list[a + t];
        key = make_key(desc_key(r.s[id]), id);
      }
      sm.x_sort[t] = key;
    }
    block_sync();
    bitonic_sort(sm.x_sort, static_cast<int32_t>(size));
    for (uint32_t t = static_cast<uint32_t>(tid); t < len; t += kThreads) list[a + t] = key_id(sm.x_sort[t]);
  }
  block_sync();  // blocks sort different numbers of chunks: every block's last barrier before the exchange is this one
  exchange_publish();
  exchange_close();
  return static_cast<int32_t>(made);
}

// The row's token when the bounds prove it, else path 0 (the caller runs the radix path).
__device__ __noinline__ Pick sample_top_p_binned(const BinnedRow r, Smem& sm) {
  constexpr uint32_t kPath = kPathSorted | kPathCertified | kPathBinned;
  const Pick undecided{0, 0u};
  const int q = 63 - (32 - __clz(r.n));
  const Candidates cand = build_bins(r, q, sm);
  const double* before_w = sm.bins.before_w;
  const uint32_t* before_c = sm.bins.before_c;
  if (before_c[kWeightBins] != static_cast<uint32_t>(r.n) || cand.count == 0) return undecided;
  // The radix path's mu covers the CPU's sums against any parallel order. The bins add, relative to any sum compared
  // (each holds weight 1): their weights' error, the fixed point's 2^-(q-1), the last bin's left-out weights, the
  // double additions over bins and tiles (2^-53 per term); doubled for our side and the CPU's, doubled again to spare.
  const double bins_error =
      kBinWeightError + pow2(1 - q) + r.n * 0x1.0p-63 + (kWeightBins + 3.0 * kSamplingTile + 64.0) * kEps;
  const double mu = r.mu + 4.0 * bins_error;
  const auto empty = [&](int j) { return before_c[j + 1] == before_c[j]; };

  // The cut: the first position k (0-based) where the CPU's running sum C(k) >= target, k = 0 whatever the target.
  const double target = r.top_p * before_w[kWeightBins];
  const double lo = target * (1.0 - mu) - kTiny, hi = target * (1.0 + mu) + kTiny;
  int a = -1, b = -1;
  bin_range(
      [&](int j) {
        // Could the sum before bin j be below the target, and the sum through it reach it?
        return !empty(j) && before_w[j] * (1.0 - mu) - kTiny < hi && before_w[j + 1] * (1.0 + mu) + kTiny >= lo;
      },
      a, b, sm);
  if (a < 0) return undecided;
  const auto next_bin = [&](int j) {  // the planted faults need the entry after the decided one in the tile
    while (j + 1 < kWeightBins - 1 && empty(j + 1)) ++j;
    return min(j + 1, kWeightBins - 1);
  };
  if (r.keep_shift != 0) b = next_bin(b);
  int32_t len = static_cast<int32_t>(before_c[b + 1] - before_c[a]);
  if (len > r.cap || !load_bins(r, a, b, len, before_w[a], sm)) return undecided;
  uint32_t first = before_c[a];
  int32_t t = first_where(
      len,
      [&](int32_t t) {
        const double prev = t == 0 ? before_w[a] : sm.w[t - 1];
        return (first + t == 0 || prev * (1.0 + mu) + kTiny < lo) && sm.w[t] * (1.0 - mu) - kTiny >= hi;
      },
      sm);
  if (t < 0) return undecided;
  t = min(t + r.keep_shift, len - 1);
  const uint32_t keep = first + static_cast<uint32_t>(t) + 1;
  // The candidates are a prefix of the order (weights fall along it): the first min(keep, min-p survivors).
  const uint32_t m = min(keep, cand.count);
  const double total = m == keep ? sm.w[t] : cand.w;

  // The draw: one candidate is taken without a walk (sampler.cc); it is position 0, the first entry of bin 0.
  const double u = r.u;
  int da = 0, db = 0;
  if (m > 1) {
    bin_range(
        [&](int j) {
          // Could the walk's sum before bin j be <= u, and through it > u?
          return !empty(j) && before_c[j] < m && (before_w[j] / total) * (1.0 - mu) - kTiny <= u &&
                 (before_w[j + 1] / total) * (1.0 + mu) + kTiny > u;
        },
        da, db, sm);
    if (da < 0) return undecided;
    if (r.draw_shift != 0) db = next_bin(db);
  }
  if (da < a || db > b) {
    len = static_cast<int32_t>(before_c[db + 1] - before_c[da]);
    if (len > r.cap || !load_bins(r, da, db, len, before_w[da], sm)) return undecided;
    a = da;
    first = before_c[a];
  }
  if (m == 1) return {key_id(sm.key[0]), kPath};  // bin 0 is in the tile (a == 0): entry 0 is position 0
  int32_t i = first_where(
      len,
      [&](int32_t t) {
        const uint32_t pos = first + static_cast<uint32_t>(t);
        if (pos >= m) return false;
        const double prev = t == 0 ? before_w[a] : sm.w[t - 1];
        return (pos == 0 || (prev / total) * (1.0 + mu) + kTiny < u) && (sm.w[t] / total) * (1.0 - mu) - kTiny > u;
      },
      sm);
  if (i < 0) return undecided;
  i = min(i + r.draw_shift, len - 1);
  return {key_id(sm.key[i]), kPath};
}

}  // namespace duet::backend::cuda::sampling
