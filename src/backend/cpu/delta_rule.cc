#include "backend/cpu/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/matmul.h"

namespace duet::backend::cpu {

namespace {

// acc[0, value_dim) = sum_i x[i] * S[i, :]: a row vector times the state (S^T x).
void read_state(const float* state, int64_t key_dim, int64_t value_dim, const float* x, float* acc) {
  for (int64_t j = 0; j < value_dim; ++j) acc[j] = 0.0f;
  for (int64_t i = 0; i < key_dim; ++i) {
    const float xi = x[i];
    const float* row = state + i * value_dim;
    for (int64_t j = 0; j < value_dim; ++j) acc[j] += xi * row[j];
  }
}

// Folds the `count` rows of a chunk into the boundary state: S = S * exp(cum_last) + sum_j (k_j exp(cum_last -
// cum_j)) (outer) value_j.
void fold_chunk(const DeltaRuleHead& head, int64_t key_dim, int64_t value_dim, int64_t count) {
  const float last = head.chunk_cum_decay[count - 1];
  const float chunk_decay = std::exp(last);
  float* s = head.boundary_state;
  for (int64_t i = 0; i < key_dim * value_dim; ++i) s[i] *= chunk_decay;
  for (int64_t j = 0; j < count; ++j) {
    const float decay = std::exp(last - head.chunk_cum_decay[j]);
    const float* key = head.chunk_keys + j * key_dim;
    const float* value = head.chunk_values + j * value_dim;
    for (int64_t a = 0; a < key_dim; ++a) {
      const float ka = key[a] * decay;
      float* row = s + a * value_dim;
      for (int64_t b = 0; b < value_dim; ++b) row[b] += ka * value[b];
    }
  }
}

void copy_head(const DeltaRuleHead& from, const DeltaRuleHead& to, int64_t key_dim, int64_t value_dim) {
  std::copy_n(from.boundary_state, key_dim * value_dim, to.boundary_state);
  std::copy_n(from.chunk_keys, kDeltaRuleChunk * key_dim, to.chunk_keys);
  std::copy_n(from.chunk_cum_decay, kDeltaRuleChunk, to.chunk_cum_decay);
  std::copy_n(from.chunk_values, kDeltaRuleChunk * value_dim, to.chunk_values);
}

}  // namespace

void delta_rule_chunked(const DeltaRuleHead& head, int64_t key_dim, int64_t value_dim, int64_t filled, int64_t rows,
                        const float* q, const float* k, const float* v, const float* g, const float* beta, float* out,
                        const DeltaRuleHead* before_fold, std::span<const DeltaRuleCopy> copies) {
  size_t next_copy = 0;
  std::vector<float> k_beta(static_cast<size_t>(key_dim));
  std::vector<float> read(static_cast<size_t>(value_dim));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = filled;  // this row's index inside its chunk
    const float* qt = q + r * key_dim;
    const float* kt = k + r * key_dim;
    const float* vt = v + r * value_dim;
    const float cum = (t == 0 ? 0.0f : head.chunk_cum_decay[t - 1]) + g[r];
    const float decay_from_start = std::exp(cum);
    for (int64_t a = 0; a < key_dim; ++a) k_beta[a] = kt[a] * beta[r];

    // Corrected value: beta * v minus what the state before this row predicts for k, i.e. the boundary state's
    // read (decayed to this row) and the earlier rows of the chunk (the unit-lower-triangular solve, one row).
    float* value = head.chunk_values + t * value_dim;
    read_state(head.boundary_state, key_dim, value_dim, k_beta.data(), read.data());
    for (int64_t b = 0; b < value_dim; ++b) value[b] = vt[b] * beta[r] - read[b] * decay_from_start;
    for (int64_t j = 0; j < t; ++j) {
      const float weight =
          dot(k_beta.data(), head.chunk_keys + j * key_dim, key_dim) * std::exp(cum - head.chunk_cum_decay[j]);
      const float* earlier = head.chunk_values + j * value_dim;
      for (int64_t b = 0; b < value_dim; ++b) value[b] -= weight * earlier[b];
    }
    for (int64_t a = 0; a < key_dim; ++a) head.chunk_keys[t * key_dim + a] = kt[a];
    head.chunk_cum_decay[t] = cum;

    // Output: the boundary state read by the decayed query, plus the chunk's rows up to and including this one.
    float* o = out + r * value_dim;
    read_state(head.boundary_state, key_dim, value_dim, qt, read.data());
    for (int64_t b = 0; b < value_dim; ++b) o[b] = read[b] * decay_from_start;
    for (int64_t j = 0; j <= t; ++j) {
      const float weight = dot(qt, head.chunk_keys + j * key_dim, key_dim) * std::exp(cum - head.chunk_cum_decay[j]);
      const float* earlier = head.chunk_values + j * value_dim;
      for (int64_t b = 0; b < value_dim; ++b) o[b] += weight * earlier[b];
    }

    filled = t + 1;
    if (filled == kDeltaRuleChunk) {
      if (before_fold != nullptr) copy_head(head, *before_fold, key_dim, value_dim);
      fold_chunk(head, key_dim, value_dim, kDeltaRuleChunk);
      filled = 0;
    }
    for (; next_copy < copies.size() && copies[next_copy].rows == r + 1; ++next_copy)
      copy_head(head, copies[next_copy].to, key_dim, value_dim);
  }
}

void delta_rule_recurrent(float* state, int64_t key_dim, int64_t value_dim, int64_t rows, const float* q,
                          const float* k, const float* v, const float* g, const float* beta, float* out) {
  std::vector<float> delta(static_cast<size_t>(value_dim));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qt = q + r * key_dim;
    const float* kt = k + r * key_dim;
    const float* vt = v + r * value_dim;
    const float decay = std::exp(g[r]);
    for (int64_t i = 0; i < key_dim * value_dim; ++i) state[i] *= decay;
    read_state(state, key_dim, value_dim, kt, delta.data());
    for (int64_t b = 0; b < value_dim; ++b) delta[b] = (vt[b] - delta[b]) * beta[r];
    for (int64_t a = 0; a < key_dim; ++a) {
      float* row = state + a * value_dim;
      for (int64_t b = 0; b < value_dim; ++b) row[b] += kt[a] * delta[b];
    }
    read_state(state, key_dim, value_dim, qt, out + r * value_dim);
  }
}

void delta_rule_current_state(const DeltaRuleHead& head, int64_t key_dim, int64_t value_dim, int64_t filled,
                              float* state) {
  std::vector<float> boundary(head.boundary_state, head.boundary_state + key_dim * value_dim);
  DeltaRuleHead copy = head;
  copy.boundary_state = boundary.data();
  if (filled > 0) fold_chunk(copy, key_dim, value_dim, filled);
  for (int64_t i = 0; i < key_dim * value_dim; ++i) state[i] = boundary[i];
}

}  // namespace duet::backend::cpu
