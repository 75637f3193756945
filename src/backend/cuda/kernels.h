#pragma once
// Launchers of duet's own CUDA kernels, one .cu file per operation (the file named beside each group). All take
// BF16 activations row-major [rows, width] and compute in fp32 wherever the CPU reference does (norm statistics,
// softmax, the GDN gates, state and delta rule), rounding to BF16 where the spec (../shared/spec/qwen35.md) and
// transformers do. Every launcher is asynchronous on `stream`, allocates nothing and throws duet::Error when the
// launch fails. Row invariance: no kernel's result for a row depends on how many rows or pieces the step has,
// nor on where a prompt was cut at multiples of 64.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_step.h"

namespace duet::backend::cuda {

// A weight vector or matrix on the device, in the dtype the checkpoint stores.
struct DeviceWeight {
  const void* data = nullptr;
  bool f32 = false;  // else bf16
  int64_t rows = 0;
  int64_t cols = 0;
};

// ---- elementwise.cu
// out[r] = table[ids[r]]  (table [vocab, hidden])
void launch_embed(const bf16* table, int64_t hidden, const int32_t* ids, int32_t rows, bf16* out, cudaStream_t stream);
// Per row of width `width`: y = x * rsqrt(mean(x^2) + eps) * (one_plus ? 1 + w : w), statistics in fp32, rounded to
// BF16 once. Rows may be heads: `rows` rows of `width` contiguous values (x and out may alias).
void launch_rms_norm(const bf16* x, int64_t rows, int32_t width, DeviceWeight w, float eps, bool one_plus, bf16* out,
                     cudaStream_t stream);
// x += delta (as launch_add), then out = launch_rms_norm(x): one pass over x with the bits of the two launches.
// out must not alias x or delta.
void launch_add_rms_norm(bf16* x, const bf16* delta, int64_t rows, int32_t width, DeviceWeight w, float eps,
                         bool one_plus, bf16* out, cudaStream_t stream);
// x += y (fp32 sum, rounded to BF16), n elements.
void launch_add(bf16* x, const bf16* y, int64_t n, cudaStream_t stream);
// out = silu(gate) * up in fp32, rounded to BF16, n elements (out may alias gate).
void launch_swiglu(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream);
// out[i] = x[rows[i]] for `count` rows of `width`.
void launch_gather_rows(const bf16* x, int32_t width, const int32_t* rows, int32_t count, bf16* out,
                        cudaStream_t stream);
// y[rows[i]] = bf16(float(y[rows[i]]) + delta[i]) for `count` rows of `width`: an adapter's fp32 correction added to
// the adapted rows of a projection's output (delta [count, width] fp32, rows distinct).
void launch_add_rows(const float* delta, int32_t width, const int32_t* rows, int32_t count, bf16* y,
                     cudaStream_t stream);
// out = float(x), n elements.
void launch_bf16_to_f32(const bf16* x, int64_t n, float* out, cudaStream_t stream);
// out = bf16(x) rounded to nearest even (as torch's .to(bfloat16)), n elements: host rows written into activations
// (CudaBackend::write_rows: an image's rows over its tokens' embeddings).
void launch_f32_to_bf16(const float* x, int64_t n, bf16* out, cudaStream_t stream);

// ---- skinny_gemm.cu
// y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation, y as BF16 (y_f32 false) or fp32. For the few rows of decode
// steps. Batch-invariant: each output element is reduced over k in one fixed order whatever m is.
void launch_skinny_gemm(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, void* y, bool y_f32,
                        cudaStream_t stream);
// Where the columns of one skinny GEMM go: segment i is columns [first[i], first[i + 1]) written as its own
// [m, first[i + 1] - first[i]] array at y[i]. Projections that read the same input are one GEMM over their weights
// concatenated at load (rows of one allocation, back to back), each projection's output where it always was: a
// column's dot product does not depend on its neighbours, so every output keeps its bits.
struct SkinnyOutputs {
  static constexpr int kMaxSegments = 4;
  int segments = 1;
  void* y[kMaxSegments] = {};
  int32_t first[kMaxSegments + 1] = {};
  // SwiGLU in the epilogue (launch_skinny_gemm_swiglu): w's rows [0, swiglu_half) are the gate, [swiglu_half, n) the
  // up projection, and y[0] receives [m, swiglu_half] of bf16(silu(g) * u), g and u the two GEMMs' BF16 outputs:
  // launch_swiglu's bits over the GEMM's. 0: plain outputs.
  int32_t swiglu_half = 0;
  __host__ __device__ int32_t width(int i) const { return first[i + 1] - first[i]; }
};
void launch_skinny_gemm_segments(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k,
                                 const SkinnyOutputs& out, bool y_f32, cudaStream_t stream);
struct SkinnyPipeline;
// The MLP's gate | up GEMM with SwiGLU in its epilogue: w is [2 half, k], the gate's rows then the up projection's
// (stored back to back), y [m, half] = bf16(silu(x gate^T) * (x up^T)) with each GEMM output rounded to BF16 first:
// the same bits as launch_skinny_gemm_segments into two arrays and then launch_swiglu, without the two arrays and the
// SwiGLU kernel. Each block takes 64 gate rows and the same 64 up rows (half % 64 == 0, k % 16 == 0). `pipeline`:
// the tests' choice of kernel; nullptr, the plan for w's shape.
void launch_skinny_gemm_swiglu(const bf16* x, int32_t m, const bf16* w, int32_t half, int32_t k, bf16* y,
                               cudaStream_t stream, const SkinnyPipeline* pipeline = nullptr);
// How the tensor-core kernel reads a weight: steps of w in flight in registers beyond the one being multiplied, steps
// asked of L2 ahead (neither changes a result), and the k slices (which fix the order of summation: production takes
// them from the weight's shape alone). launch_skinny_gemm_pipeline runs any of them, for the kernel benchmark
// (tests/cuda/skinny_gemm_bench.cu); BF16 out.
struct SkinnyPipeline {
  int ahead = 1;
  int prefetch = 4;
  int max_slices = 8;       // 1..8
  bool per_step_x = false;  // x staged a step at a time even where its whole k slice fits (the bench's comparison)
  // Blocks an SM the mma.sync kernel is compiled for: 2, or 3 (80 registers a thread, x read two tiles at a time;
  // ahead 1 and prefetch 4 only). Only when bytes arrive and how many blocks run at once: no bit changes.
  int min_blocks = 2;
  // Warps a block of the mma.sync kernel: 8 (128 w rows), 4 or 2 (BF16 out). Each warp's 16 rows are computed alike
  // whatever its block: more, smaller blocks (and clusters) for the same bits.
  int block_warps = 8;
  // The weights in registers and x read by wgmma (skinny_gemm.cu, skinny_gemm_regs_kernel): the same loads and bits
  // as the mma.sync kernel in 8-warp blocks. The plans take it with ahead 1, prefetch 4 and x by 4-byte copies; ahead
  // 2, prefetch 8, x_through_registers (x as 16-byte loads, stored by the threads) and min_blocks 3 (80 registers) are
  // the bench's experiments, built only with DUET_SKINNY_EXPERIMENTS. per_step_x and block_warps do not apply.
  bool wgmma_registers = false;
  bool x_through_registers = false;
};
void launch_skinny_gemm_pipeline(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, bf16* y,
                                 const SkinnyPipeline& pipeline, cudaStream_t stream);
// The pipeline launch_skinny_gemm takes for a weight of shape [n, k] (k % 16 == 0) in a launch of `rows` rows (1..64;
// more are launched 64 at a time). Its slices depend on the shape alone.
SkinnyPipeline skinny_plan_for(int32_t n, int32_t k, int32_t rows);

// ---- skinny_gemm_tma.cu
// The decode GEMM's TMA engine: the products launch_skinny_gemm_segments computes (SkinnyOutputs, SwiGLU rows
// included), the weights brought in by TMA and both operands read by wgmma, each output summed over k's natural k16
// groups: batch-invariant like the register-fed kernels, with bits of its own (they differ in the last place), so a
// weight takes one engine at every row count: this one for the shapes skinny_tma_for names (skinny_regs_choice.h).
// slices 0: skinny_tma_slices(n, k), the shape's own; stages 4 (a ring of 6 at up to 16 rows read gate | up 6% slower
// at one row, 32nd round; rings of 2 or 4 64-k steps a stage 9-12% slower in the model, 35th); block_rows 0: blocks of
// 128 w rows (two consumer warpgroups, two an SM), or of 64 (one consumer warpgroup, three an SM) for launches of more
// than 32 rows (35th round; the same bits at the same slices); 128 or 64 ask for one. Launches of 16 to 32 rows where
// k <= 4096, and those of one slice above 32, take 64-row blocks on a ring of 6 stages where their blocks fit
// (deep_ring_for; 43rd round; the same bits; DUET_SKINNY_TMA_DEEP=0 turns it off).
// A benchmarks build's experiments: 6 stages asked for (64-row blocks), 8 stages at one block an SM, blocks of 256 w
// rows (4 stages, one block an SM, BF16 out, no SwiGLU).
void launch_skinny_gemm_tma(const bf16* x, int32_t m, const bf16* w, int32_t n, int32_t k, const SkinnyOutputs& out,
                            bool y_f32, cudaStream_t stream, int slices = 0, int stages = 4, int block_rows = 0);
int skinny_tma_slices(int32_t n, int32_t k);
// The blocks launch_skinny_gemm_tma takes for a launch of `rows` (1..64) of [n, k] at block_rows 0 and 4 stages
// (slices 0: the shape's own): w rows 128, or 64 above 32 rows (DUET_SKINNY_TMA_HALF_ROWS moves the line but for
// SwiGLU's) when x comes by TMA; 64 on a ring of 6 stages where deep_ring_for's rule says so.
struct SkinnyTmaBlocks {
  int block_rows;
  int stages;
};
SkinnyTmaBlocks skinny_tma_blocks(int32_t rows, int32_t n, int32_t k, bool swiglu, int slices = 0);
// Tests: which launches take 64-row blocks on a ring of 6 stages: 0 none, 1 those of the rule (production's), 2 every
// launch of 64-row blocks, -1 the environment's choice (DUET_SKINNY_TMA_DEEP=0: none). The bits are the same.
void set_skinny_tma_deep_for_tests(int choice);

// ---- fp32_gemm.cu
// y[m, n] = sum_k x[m, k] * w[n, k] in fp32, each output one fma chain over k in order from +0 (batch-invariant). For
// the decision head's products (CudaBackend::host_fp32_matmul), not the model's. Every kernel computes the same
// chains, so the same bits; launch_fp32_gemm picks one by shape (fp32_gemm_kernel_for), DUET_FP32_GEMM=tiles64 pins
// the first one (for before/after figures).
void launch_fp32_gemm(const float* x, int32_t m, const float* w, int32_t n, int32_t k, float* y, cudaStream_t stream);
enum class Fp32GemmKernel { tiles64, skinny, wide };
const char* fp32_gemm_kernel_name(Fp32GemmKernel kernel);
// Whether `kernel` takes these operands (skinny and wide: k % 16 == 0, x and w 16-byte aligned; tiles64: any).
bool fp32_gemm_kernel_fits(Fp32GemmKernel kernel, const float* x, const float* w, int32_t k);
Fp32GemmKernel fp32_gemm_kernel_for(const float* x, int32_t m, const float* w, int32_t n, int32_t k);
// One kernel by name (tests and benchmarks); throws std::invalid_argument when it does not fit the operands.
void launch_fp32_gemm_with(Fp32GemmKernel kernel, const float* x, int32_t m, const float* w, int32_t n, int32_t k,
                           float* y, cudaStream_t stream);

// ---- gdn_conv.cu
// The GDN gates' inputs and outputs (launch_gdn_gates below): b, a [rows, value_heads] BF16 in; beta, g out.
struct GdnGateArrays {
  const bf16* b = nullptr;
  const bf16* a = nullptr;
  DeviceWeight A_log, dt_bias;
  int32_t value_heads = 0;
  float* beta = nullptr;
  float* g = nullptr;
};
// The causal depthwise conv + SiLU of GDN layer `gdn_layer` over every piece: for row t of a piece,
//   out[t, c] = bf16(silu(sum_j w[c, j] * in[c, t - (K-1) + j]))   (fp32 sum, w [channels, K])
// where inputs before the piece come from the piece's conv state; then the state keeps the piece's last K-1 inputs.
// With `gates`, the same launches also compute every row's gates, with launch_gdn_gates's bits (one launch less per
// layer). A step whose pieces all take the GDN decode kernels (one row, or a few rows inside one chunk:
// delta_chunks.h, decode_kernels_take) takes one kernel, a thread per (piece, channel) that reads and shifts its own
// channel's state; other steps take two (outputs, then states).
void launch_gdn_conv_silu(const DeviceStep& step, int32_t gdn_layer, DeviceWeight conv_w, int32_t channels,
                          int32_t kernel, const bf16* in, bf16* out, cudaStream_t stream,
                          const GdnGateArrays* gates = nullptr);
// Tests: steps with a piece of several rows through the wide conv kernel (1, the default, where the rows are 16-byte
// aligned: eight channels a thread) or one channel a thread (0, DUET_CONV_WIDE=0's), instead of DUET_CONV_WIDE's
// choice; negative: that choice. The same bits.
void set_conv_rows_wide_for_tests(int32_t on);

// ---- gdn_gates.cu
// Per row and value head: beta = bf16(sigmoid(b)) (kept as float), g = -exp(A_log) * softplus(a + dt_bias) in fp32
// (softplus(x) = x above 20). b, a: [rows, value_heads] BF16; A_log, dt_bias: [value_heads] as stored.
void launch_gdn_gates(const bf16* b, const bf16* a, DeviceWeight A_log, DeviceWeight dt_bias, int64_t rows,
                      int32_t value_heads, float* beta, float* g, cudaStream_t stream);

// ---- gdn_delta_rule.cu
// The gated delta rule of GDN layer `gdn_layer` for every piece, on each piece's chunked fp32 state
// (DevicePiece::delta, delta_chunks.h). qkv [rows, 2 * key_heads * key_dim + value_heads * value_dim] are the conv
// outputs: q and k are l2-normalized in fp32 per key head (eps 1e-6 inside the rsqrt of the sum of squares), q also
// scaled by key_dim^-0.5; value head j reads key head j / (value_heads / key_heads). The recurrence, per token:
//   S = S * exp(g);  d = (v - S^T k) * beta;  S = S + k (outer) d;  o = S^T q
// computed in its chunked form over the step's DeviceChunks (chunks of 64 positions), which needs chunk_scratch:
// step.chunk_scratch * value_heads floats. A row's bits depend only on its sequence, whatever the cuts and roles.
// out: [rows, value_heads * value_dim] fp32.
struct GdnDims {
  int32_t key_heads, value_heads, key_dim, value_dim;
};
// With `norm`, the rows of the pieces the decode kernels take (one row, or a few inside one chunk: DeviceStep's
// few_pieces) also get their gated norm (launch_gdn_gated_norm's bits) written to norm->out by the same kernel; a step
// with no piece for the chunked form (multi_pieces 0) then needs no launch_gdn_gated_norm.
struct GdnNormArrays {
  const bf16* z = nullptr;  // [rows, value_heads * value_dim]
  DeviceWeight w;           // [value_dim]
  float eps = 0.0f;
  bf16* out = nullptr;  // [rows, value_heads * value_dim]; must not alias qkv
};
// Whether launch_gdn_delta_rule has kernels for heads of key_dim x value_dim (16 x 32 and 128 x 128).
bool gdn_delta_rule_supports(int64_t key_dim, int64_t value_dim);
// Where the one-row pieces that complete their chunk are folded into the next S_b: after the layer's delta rule, or
// (after_last_layer) by launch_gdn_folds once the step's last GDN layer's delta rule is launched.
enum class DeltaFolds { each_layer, after_last_layer };
void launch_gdn_delta_rule(const DeviceStep& step, int32_t gdn_layer, const bf16* qkv, const float* beta,
                           const float* g, GdnDims dims, float* chunk_scratch, float* out, cudaStream_t stream,
                           const GdnNormArrays* norm = nullptr, DeltaFolds folds = DeltaFolds::each_layer);
// The folds of layers [0, gdn_layers) for a step whose delta rules were launched with DeltaFolds::after_last_layer.
void launch_gdn_folds(const DeviceStep& step, int32_t gdn_layers, GdnDims dims, cudaStream_t stream);
// DUET_DELTA_FOLDS's choice (step: after_last_layer; the default each_layer).
DeltaFolds delta_folds();
// Tests: one-row pieces take decode_dense_kernel from this many a step (0 or 1: always; a large number: never) instead
// of the default (32) or DUET_DELTA_DECODE's; a negative number gives the choice back. The bits are the same.
void set_delta_decode_dense_from_for_tests(int32_t pieces);
// Tests: how the dense kernel reads S_b: 16, rolling loads of 16 rows; 0, batches; kDeltaDenseBulk, a ring of bulk
// copies; instead of the default (the ring) or DUET_DELTA_DENSE_BULK's / DUET_DELTA_DENSE_ROLL's; a negative number
// gives the choice back. The bits are the same. kDeltaDenseKeys: the ring with the chunk's earlier keys in it too
// (the default since the 48th round; DUET_DELTA_DENSE_KEYS=0 gives kDeltaDenseBulk); kDeltaDenseKeysVectorsFirst: that
// ring with the row's vectors asked for before its first stages (DUET_DELTA_DENSE_VECTORS_FIRST=1's).
constexpr int32_t kDeltaDenseBulk = 1;
constexpr int32_t kDeltaDenseKeys = 2;
constexpr int32_t kDeltaDenseKeysVectorsFirst = 3;
void set_delta_dense_loads_for_tests(int32_t loads);
// Tests: the chunked walk's outputs in tiles (1, the default) or a column a lane (0) instead of DUET_DELTA_WALK_TILES's
// choice; a negative number gives the choice back. The bits are the same.
void set_delta_walk_tiles_for_tests(int32_t on);
// Tests: the walk's wide form (1, the default) or not (0) instead of DUET_DELTA_WALK_WIDE's choice; negative: the
// choice back. The bits are the same.
void set_delta_walk_wide_for_tests(int32_t on);
// Tests: a chunk's new keys and queries normalized eight vectors a warp at once (1; DUET_DELTA_NORM_BATCH=1's, in the
// Gram kernel and the tensor-core walk) or one at a time (0, the default) instead of DUET_DELTA_NORM_BATCH's choice;
// negative: that choice. The bits are the same.
void set_delta_norm_batch_for_tests(int32_t on);
// Tests: the tensor-core walk's rows of q, k, v, A and Q by bulk copies (1; DUET_DELTA_WALK_BULK=1's) or cp.async (0,
// the default) instead of DUET_DELTA_WALK_BULK's choice; negative: that choice. The bits are the same.
void set_delta_walk_bulk_for_tests(int32_t on);
// Tests: the walk's split fold (1; with the wide form only) or not (0) instead of DUET_DELTA_WALK_SPLIT's choice;
// negative: the choice back. The bits are the same.
void set_delta_walk_split_for_tests(int32_t on);
// Tests: the walk's tensor-core form for WY chunks (3: three TF32 passes, the default; 1: one pass, the planted
// control; 0: the FMA form; with the wide form only) instead of DUET_DELTA_WALK_MMA's choice; negative: that choice.
// Its own bits for a prompt's WY chunks.
void set_delta_walk_mma_for_tests(int32_t passes);
// Benchmarks: where the walk's time goes. `sums` (device memory, 6 counters, zeroed by the caller) gets the SM cycles
// of block (0, 0, 0) of every later walk launch in each of its phases (gdn_delta_rule.cu, walk_phase_clock); null
// stops.
void set_walk_phase_clock_for_tests(unsigned long long* sums);
// Benchmarks: where a dense decode block's time goes. `sums` (device memory, 8 counters, zeroed by the caller) gets
// every later decode_dense_kernel block's cycles in each of its phases, and [7] the blocks (gdn_delta_rule.cu,
// dense_phase_clock); null stops.
void set_dense_phase_clock_for_tests(unsigned long long* sums);

// ---- gdn_norm.cu
// Gated RMSNorm per value head: y = bf16(bf16(o * rsqrt(mean(o^2) + eps)) * w) * silu(z) in fp32, rounded to BF16.
// o: [rows, heads * dim] fp32, z: [rows, heads * dim] BF16, w: [dim] plain weight (f32 or bf16).
void launch_gdn_gated_norm(const float* o, const bf16* z, DeviceWeight w, float eps, int64_t rows, int32_t heads,
                           int32_t dim, bf16* out, cudaStream_t stream);

// ---- attention_prep.cu
// For attention layer `attn_layer`: per row, per query head, (1+w) RMSNorm of the query half of q_gate (in place)
// then RoPE; per KV head, (1+w) RMSNorm of k and RoPE, and k, v written into the row's page (at step.row_position).
// RoPE on dims [0, rotary_dim), pairs (i, i + rotary_dim/2), inv_freq = theta^(-2i/rotary_dim), angle and cos/sin in
// fp32 as transformers computes them, cos/sin rounded to BF16, the rotated values rounded once. The angle's position:
// step.row_position, or with step.row_rope (M-RoPE, docs/vision.md 5) the row's position of the stream that
// `streams` gives pair i, as the CPU's attention_mixer.cc reads AttentionShape::rope_streams.
// q_gate: [rows, q_heads, 2, head_dim] (per head the query then the gate), k, v: [rows, kv_heads * head_dim].
struct AttentionDims {
  int32_t q_heads, kv_heads, head_dim, rotary_dim;
  float rope_theta, norm_eps;
};
constexpr int kMaxRotaryPairs = 256;  // head_dim up to 512
// Which of a row's rotary positions (0 time, 1 height, 2 width; DeviceStep::row_rope) rotary pair i reads: the
// model's AttentionShape::rope_streams, all 0 for a model without M-RoPE. A kernel argument (256 bytes), fixed per
// model, so a captured graph holds the same values it would be launched with again.
struct RopeStreams {
  uint8_t stream[kMaxRotaryPairs] = {};
};
void launch_attention_prep(const DeviceStep& step, int32_t attn_layer, bf16* q_gate, const bf16* k, const bf16* v,
                           DeviceWeight q_norm, DeviceWeight k_norm, AttentionDims dims, cudaStream_t stream,
                           const RopeStreams& streams = {});

// ---- attention.cu
// Causal softmax attention of every row over its sequence's pages (positions 0 .. its own), scale head_dim^-0.5,
// query head j reading KV head j / (q_heads / kv_heads), fp32 scores and softmax with keys taken in position order
// in blocks of 64 (so a row's arithmetic depends on its position alone), then times sigmoid(gate):
// out: [rows, q_heads * head_dim] BF16. Rows of decode pieces split their key blocks over a cluster of 8 blocks
// (which blocks by position alone) and merge the partial softmaxes in a fixed order: their bits depend only on their
// own sequence too, but may differ in the last bits from the same row computed as a prefill row.
void launch_attention(const DeviceStep& step, int32_t attn_layer, const bf16* q_gate, AttentionDims dims, bf16* out,
                      cudaStream_t stream);
// Tests: prefill launches split each tile's output dims over this many blocks (1, 2 or 4; head dims of 128 and 256),
// instead of the launch's own choice (0, the default). The bits are the same whichever (attention_prefill.cu).
void set_prefill_value_slices_for_tests(int slices);
// Tests: steps of up to this many rows take the lanes decode form with each KV head's queries split over blocks of one
// (0: never), instead of DUET_ATTN_QUERY_SPLIT_ROWS's; a negative number gives the choice back. The bits are the same
// (attention_decode_lanes.cu).
void set_attention_query_split_rows_for_tests(int32_t rows);

}  // namespace duet::backend::cuda
