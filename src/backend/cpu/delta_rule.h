#pragma once
// The gated delta rule of one GDN value head, in fp32, in two forms that agree up to rounding:
//
//   per token:  S = S * exp(g);  d = (v - S^T k) * beta;  S = S + k (outer) d;  o = S^T q      S: [key_dim, value_dim]
//
// The chunked form (what transformers' torch_chunk_gated_delta_rule computes, chunk 64) keeps S only at chunk
// boundaries, which sit at absolute positions that are multiples of 64, plus the rows of the current chunk so far
// (their keys, cumulative log-decay and corrected values). A row's output is computed from the boundary state and
// the earlier rows of its chunk, by the same arithmetic whether the chunk arrives whole, in pieces or one token at
// a time. So a row's bytes do not depend on where a prompt was cut, nor on whether it was prefill or decode.
#include <cstdint>
#include <span>

namespace duet::backend::cpu {

constexpr int64_t kDeltaRuleChunk = 64;

// One value head's chunked state (views into a sequence's GDN state).
struct DeltaRuleHead {
  float* boundary_state;   // [key_dim, value_dim]: S at the start of the current chunk
  float* chunk_keys;       // [64, key_dim]: l2-normalized keys of the chunk's rows so far
  float* chunk_cum_decay;  // [64]: sum of g from the chunk start to each row (log space)
  float* chunk_values;     // [64, value_dim]: corrected values (beta * (v - what the state predicted))
};

// A copy of the whole head (boundary state and chunk rows) once the first `rows` rows of a delta_rule_chunked call
// have run, after any fold there: the bytes a call that stopped at that row would have left behind (a GDN snapshot
// inside a step, StepPiece::snapshots).
struct DeltaRuleCopy {
  int64_t rows = 0;
  DeltaRuleHead to{};
};

// Runs `rows` tokens whose first sits `filled` rows into the current chunk (filled = position % 64). q is already
// l2-normalized and scaled by key_dim^-0.5, k is l2-normalized. q, k: [rows, key_dim]; v, out: [rows, value_dim];
// g (log decay, <= 0), beta: [rows]. When a chunk completes, its rows are folded into the boundary state; with
// `before_fold`, the boundary state and the completed chunk's rows are first copied there (a verify step keeps them,
// so that its rows past the fold can be taken back: CpuGdnRewind). `copies` (ascending rows) are taken on the way.
void delta_rule_chunked(const DeltaRuleHead& head, int64_t key_dim, int64_t value_dim, int64_t filled, int64_t rows,
                        const float* q, const float* k, const float* v, const float* g, const float* beta, float* out,
                        const DeltaRuleHead* before_fold = nullptr, std::span<const DeltaRuleCopy> copies = {});

// The per-token form on a full state S [key_dim, value_dim], as transformers' torch_recurrent_gated_delta_rule.
void delta_rule_recurrent(float* state, int64_t key_dim, int64_t value_dim, int64_t rows, const float* q,
                          const float* k, const float* v, const float* g, const float* beta, float* out);

// The full state S after the chunk's `filled` rows: the boundary state advanced through them (for tests).
void delta_rule_current_state(const DeltaRuleHead& head, int64_t key_dim, int64_t value_dim, int64_t filled,
                              float* state);

}  // namespace duet::backend::cpu
