#pragma once
// The joint head's operations as CUDA kernels over fp32 rows in device memory (head_kernels.cu), each computing what
// its namesake in decision/head_math.h and head_forward.cc computes on the host: the statistics and the sums that
// the host takes in double are taken in double here too. No result depends on another decision's work or on how
// many rows share a launch. Every launcher is asynchronous on `stream` and throws duet::Error when the launch fails.
#include <cuda_runtime.h>

#include <cstdint>

namespace duet::decision::cuda {

// LayerNorm per row (eps 1e-5, biased variance in double, affine): out = (x - mean) * rsqrt(var + eps) * w + b.
// x and out may alias.
void launch_layer_norm(const float* x, int64_t rows, int32_t width, const float* weight, const float* bias, float* out,
                       cudaStream_t stream);
// y[r, :] += bias, then with `gelu` y = 0.5 y (1 + erf(y / sqrt 2)) (the bias may be null).
void launch_bias_gelu(float* y, int64_t rows, int32_t width, const float* bias, bool gelu, cudaStream_t stream);
// x += y, n elements.
void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);
// out[i] = x[index[i]] for `count` rows of `width`.
void launch_gather(const float* x, int32_t width, const int32_t* index, int32_t count, float* out, cudaStream_t stream);

// MultiheadAttention's core without its projections: q [nq, w], k and v [nm, w] (already projected, biases added),
// `heads` heads of d = w / heads (d <= kMaxHeadDim, nm <= attention_max_memory_rows(): the caller checks both); per
// (head, query) softmax(q k^T / sqrt d) v into out [nq, w]. One block per (head, query), its scores in shared memory:
// its keys in a fixed order, so a query's result depends on its own row and the keys alone.
constexpr int kMaxHeadDim = 128;
int64_t attention_max_memory_rows();
void launch_attention(const float* q, int32_t nq, const float* k, const float* v, int32_t nm, int32_t width,
                      int32_t heads, float* out, cudaStream_t stream);

// The same core over memory rows m_j with the key and value projections folded into the queries instead of applied
// to every row (device_head.cc chooses per call). For head h (d columns) of query row i, q_h its slice of q:
//   u = W_k,h^T q_h (w values), c = q_h . b_k,h        a thread per (head, column), the fma chain over the d rows
//   s_j = scale (u . m_j + c)                          launch_fp32_gemm: S^T [nm, R] = M U^T (R = nq heads rows
//                                                      u, one fma chain over the w columns per score)
//   e_j = exp(s_j - max_j s_j), sum_j e_j in double    over chunks of rows (kFoldChunkRows or more), chunks in order
//   z = sum_j e_j m_j / sum_j e_j                      per chunk a 64 x 64 tile of (u, column) walking its rows in
//                                                      order, the chunks' partial sums then added in chunk order
//   out_h = W_v,h z + b_v,h                            a warp per output column: lanes' fma chains, then a fixed tree
// which is softmax(scale q_h k_j) v_j with k_j = W_k,h m_j + b_k,h and v_j = W_v,h m_j + b_v,h up to fp32 rounding
// (c is the same for every row j, so it cancels in the softmax; it is kept so the scores are the unfolded ones).
// About 2 R nm w multiply-adds against the 2 nm w^2 of projecting every row (plus nm R w of the unfolded kernel).
// Every sum is in an order fixed by (nq, nm, w, heads) alone, no atomics: a decision's output depends on its own
// rows alone; a query's output depends on its own row and the memory rows alone (not on the other queries).
constexpr int32_t kFoldChunkRows = 512;
struct FoldedAttention {
  const float* q = nullptr;  // [nq, w] the projected queries, bias added
  int32_t queries = 0;
  const float* memory = nullptr;  // [nm, w]
  int32_t rows = 0;
  const float* key_weight = nullptr;    // [w, w] (out, in)
  const float* key_bias = nullptr;      // [w] or null
  const float* value_weight = nullptr;  // [w, w]
  const float* value_bias = nullptr;    // [w] or null
  int32_t width = 0, heads = 0;
};
// The device scratch launch_folded_attention takes (the caller's, 256-byte aligned; free after the launch's work).
size_t folded_attention_scratch_bytes(int32_t queries, int32_t rows, int32_t width, int32_t heads);
// out [nq, w]: the heads' outputs side by side, as launch_attention's (the out projection is the caller's).
void launch_folded_attention(const FoldedAttention& a, void* scratch, float* out, cudaStream_t stream);

// A chunk's share of the span sums: for each of its rows r (positions first..first+count-1, in order), the row of
// normed [count, h] is added in double to sums[span_at[first + r]] when that span is >= 0. One thread per column walks
// the rows in position order, so the sums do not depend on where the prompt was cut.
void launch_span_sums(const float* normed, int32_t count, int32_t hidden, const int32_t* span_at, int64_t first,
                      double* sums, cudaStream_t stream);
// means[s, :] = float(sums[s, :] / sizes[s]) for `spans` rows of h.
void launch_span_means(const double* sums, const int32_t* sizes, int32_t spans, int32_t hidden, float* means,
                       cudaStream_t stream);

// The options' summary of each question (head_forward.cc): for question i with options [first[i], first[i + 1]) of
// r [N, w], scores <r_o, b_i> (double) / sqrt(w), softmax, summaries[i] = sum_o p_o r_o. scores: [N] scratch.
void launch_question_summaries(const float* r, const float* b, const int32_t* first, int32_t questions, int32_t width,
                               float* scores, float* summaries, cudaStream_t stream);
// f[i] += global[:] + type_embedding[types[i]] for `questions` rows of w.
void launch_add_global_and_type(float* f, const float* global, const float* type_embedding, const int32_t* types,
                                int32_t questions, int32_t width, cudaStream_t stream);
// features [N, 4w] = [a; z; a * z; |a - z|] of a = fo [N, w], z = o [N, w].
void launch_scorer_features(const float* fo, const float* o, int32_t options, int32_t width, float* features,
                            cudaStream_t stream);

// The per-option logits (head_forward.cc): prior = prior_scale <n(l_r), n(q_owner + g)> (eps 1e-12) and
// joint = joint_scale cos(fo_r, o_r) (eps 1e-8) + scored[r]; logits[r] = prior + gate * joint. All [N] out.
struct OptionScoreInputs {
  const float* lexical_means;   // [N, h]
  const float* question_means;  // [Q, h]
  const float* last_row;        // [h]
  const int32_t* owner;         // [N]
  const float* fo;              // [N, w]
  const float* o;               // [N, w]
  const float* scored;          // [N]
  int32_t options, hidden, width;
  float prior_scale, joint_scale, gate;
};
void launch_option_scores(const OptionScoreInputs& in, float* logits, float* prior, float* joint, cudaStream_t stream);

}  // namespace duet::decision::cuda
