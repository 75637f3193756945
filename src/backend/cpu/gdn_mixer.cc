// Gated DeltaNet mixer on the CPU: projections, causal depthwise conv + SiLU, l2-normalized q/k, the gated delta
// rule per value head, gated RMSNorm, out_proj. All fp32.
#include <cmath>
#include <vector>

#include "backend/cpu/adapted_projection.h"
#include "backend/cpu/delta_rule.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/scalar_math.h"
#include "backend/cpu/weight_rows.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::backend::cpu {

namespace {

// u[r, c] = silu(sum_j w[c, j] * in[c, t - (K-1) + j]) per piece, where inputs before the piece come from the
// sequence's conv history (zeros at the start); then the history keeps the last K-1 inputs. In place on qkv. A
// rewindable piece's window (history, then its inputs) is kept for StateStorage::rewind, and a snapshot at position s
// gets the history a step ending at s would have left: the K-1 inputs before s, read off the same window.
void causal_conv_silu(const Weight& conv, const GdnShape& shape, std::span<const StepPiece> pieces,
                      std::span<CpuGdnState* const> states, std::span<CpuGdnRewind* const> rewinds,
                      std::span<const std::vector<CpuGdnState*>> snapshots, std::vector<float>& qkv) {
  const int64_t channels = shape.conv_channels(), kernel = shape.conv_kernel, history = kernel - 1;
  for (size_t p = 0; p < pieces.size(); ++p)
    if (pieces[p].rewindable)
      rewinds[p]->conv_window.resize(static_cast<size_t>((history + pieces[p].rows) * channels));
  global_thread_pool().parallel_for(static_cast<size_t>(channels), [&](size_t begin, size_t end) {
    std::vector<float> w(static_cast<size_t>(kernel));
    std::vector<float> window;
    for (size_t c = begin; c < end; ++c) {
      weight_to_float(conv, static_cast<int64_t>(c) * kernel, kernel, w.data());
      for (size_t p = 0; p < pieces.size(); ++p) {
        const auto& piece = pieces[p];
        float* hist = states[p]->conv_history.data();
        // window = [history (K-1) | this piece's inputs], so input t sits at window[history + t].
        window.resize(static_cast<size_t>(history + piece.rows));
        for (int64_t j = 0; j < history; ++j) window[j] = hist[j * channels + c];
        for (int64_t t = 0; t < piece.rows; ++t) window[history + t] = qkv[(piece.first_row + t) * channels + c];
        for (int64_t t = 0; t < piece.rows; ++t) {
          float acc = 0.0f;
          for (int64_t j = 0; j < kernel; ++j) acc += w[j] * window[t + j];
          qkv[(piece.first_row + t) * channels + c] = silu(acc);
        }
        if (piece.rewindable)
          for (size_t j = 0; j < window.size(); ++j) rewinds[p]->conv_window[j * channels + c] = window[j];
        for (size_t s = 0; s < piece.snapshots.size(); ++s) {
          const int64_t at = piece.snapshots[s].position - piece.start_position;  // rows run before it
          float* kept = snapshots[p][s]->conv_history.data();
          for (int64_t j = 0; j < history; ++j) kept[j * channels + c] = window[at + j];
        }
        for (int64_t j = 0; j < history; ++j) hist[j * channels + c] = window[piece.rows + j];
      }
    }
  });
}

}  // namespace

void gdn_mixer(const GdnWeights& w, const GdnShape& shape, const CpuActivations& x, std::span<const StepPiece> pieces,
               std::span<CpuGdnState* const> states, std::span<CpuGdnRewind* const> rewinds,
               std::span<const std::vector<CpuGdnState*>> snapshots, CpuActivations& out) {
  const int64_t rows = x.rows();
  const int64_t channels = shape.conv_channels();
  const int64_t kd = shape.key_dim, vd = shape.value_dim, kh = shape.key_heads, vh = shape.value_heads;
  const int64_t key_width = kh * kd, value_width = vh * vd;

  std::vector<float> qkv(static_cast<size_t>(rows * channels));   // [rows, q | k | v]
  std::vector<float> z(static_cast<size_t>(rows * value_width));  // [rows, value_heads * value_dim]
  std::vector<float> b(static_cast<size_t>(rows * vh));           // [rows, value_heads]
  std::vector<float> a(static_cast<size_t>(rows * vh));           // [rows, value_heads]
  project(x.values.data(), rows, w.in_proj_qkv, w.adapter.in_proj_qkv, pieces, qkv.data());
  project(x.values.data(), rows, w.in_proj_z, w.adapter.in_proj_z, pieces, z.data());
  project(x.values.data(), rows, w.in_proj_b, w.adapter.in_proj_b, pieces, b.data());
  project(x.values.data(), rows, w.in_proj_a, w.adapter.in_proj_a, pieces, a.data());
  causal_conv_silu(w.conv1d, shape, pieces, states, rewinds, snapshots, qkv);

  // q, k: l2-normalized per key head (q also scaled by key_dim^-0.5); beta = sigmoid(b);
  // g = -exp(A_log) * softplus(a + dt_bias).
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kd)));
  std::vector<float> beta(static_cast<size_t>(rows * vh)), g(static_cast<size_t>(rows * vh));
  global_thread_pool().parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      float* row = qkv.data() + r * channels;
      for (int64_t h = 0; h < kh; ++h) {
        float* q = row + h * kd;
        l2_normalize(q, kd, 1e-6f);
        for (int64_t i = 0; i < kd; ++i) q[i] *= q_scale;
        l2_normalize(row + key_width + h * kd, kd, 1e-6f);
      }
      for (int64_t h = 0; h < vh; ++h) {
        beta[r * vh + h] = sigmoid(b[r * vh + h]);
        const float decay_rate = std::exp(weight_at(w.A_log, h));
        g[r * vh + h] = -decay_rate * softplus(a[r * vh + h] + weight_at(w.dt_bias, h));
      }
    }
  });

  // A rewindable piece that completes its chunk keeps the state from just before the fold (its copies sized here, off
  // the pool); it has at most 64 rows, so it folds at most once.
  for (size_t p = 0; p < pieces.size(); ++p) {
    if (!pieces[p].rewindable) continue;
    if (pieces[p].rows > kDeltaRuleChunk) fail("gdn: a rewindable piece of {} rows (at most 64)", pieces[p].rows);
    CpuGdnRewind& kept = *rewinds[p];
    const int64_t start = pieces[p].start_position, boundary = (start / kDeltaRuleChunk + 1) * kDeltaRuleChunk;
    kept.start = start, kept.rows = pieces[p].rows;
    kept.folded_at = start + pieces[p].rows >= boundary ? boundary : -1;
    if (kept.folded_at >= 0) kept.head(shape, 0);
  }

  // The delta rule, one task per (piece, value head); value head j reads key head j / (vh / kh).
  std::vector<float> core(static_cast<size_t>(rows * value_width));  // [rows, value_heads * value_dim]
  const int64_t group = vh / kh;
  const size_t tasks = pieces.size() * static_cast<size_t>(vh);
  global_thread_pool().parallel_for(tasks, [&](size_t begin, size_t end) {
    std::vector<float> q, k, v, gt, bt, o;
    std::vector<DeltaRuleCopy> copies;
    for (size_t task = begin; task < end; ++task) {
      const size_t p = task / static_cast<size_t>(vh);
      const int64_t h = static_cast<int64_t>(task % static_cast<size_t>(vh)), key_head = h / group;
      const auto& piece = pieces[p];
      const int64_t n = piece.rows;
      q.resize(n * kd), k.resize(n * kd), v.resize(n * vd), gt.resize(n), bt.resize(n), o.resize(n * vd);
      for (int64_t t = 0; t < n; ++t) {
        const float* row = qkv.data() + (piece.first_row + t) * channels;
        for (int64_t i = 0; i < kd; ++i) q[t * kd + i] = row[key_head * kd + i];
        for (int64_t i = 0; i < kd; ++i) k[t * kd + i] = row[key_width + key_head * kd + i];
        for (int64_t i = 0; i < vd; ++i) v[t * vd + i] = row[2 * key_width + h * vd + i];
        gt[t] = g[(piece.first_row + t) * vh + h];
        bt[t] = beta[(piece.first_row + t) * vh + h];
      }
      CpuGdnState& state = *states[p];
      DeltaRuleHead before_fold;
      const bool keep = piece.rewindable && rewinds[p]->folded_at >= 0;
      if (keep) before_fold = rewinds[p]->head(shape, h);
      copies.clear();
      for (size_t s = 0; s < piece.snapshots.size(); ++s)
        copies.push_back({.rows = piece.snapshots[s].position - piece.start_position, .to = snapshots[p][s]->head(h)});
      delta_rule_chunked(state.head(h), kd, vd, piece.start_position % kDeltaRuleChunk, n, q.data(), k.data(), v.data(),
                         gt.data(), bt.data(), o.data(), keep ? &before_fold : nullptr, copies);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < vd; ++i) core[(piece.first_row + t) * value_width + h * vd + i] = o[t * vd + i];
    }
  });
  for (size_t p = 0; p < pieces.size(); ++p) {
    states[p]->position = pieces[p].start_position + pieces[p].rows;
    for (size_t s = 0; s < pieces[p].snapshots.size(); ++s) snapshots[p][s]->position = pieces[p].snapshots[s].position;
    if (!pieces[p].rewindable) rewinds[p]->start = -1;  // a later step: nothing to take back any more
  }

  // Gated RMSNorm per value head (plain weight, times silu(z)), then out_proj.
  const float eps = static_cast<float>(shape.norm_eps);
  global_thread_pool().parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r)
      for (int64_t h = 0; h < vh; ++h) {
        float* o = core.data() + r * value_width + h * vd;
        rms_norm_gated(o, z.data() + r * value_width + h * vd, vd, w.norm, eps, o);
      }
  });
  project(core.data(), rows, w.out_proj, w.adapter.out_proj, pieces, out.values.data());
}

}  // namespace duet::backend::cpu
