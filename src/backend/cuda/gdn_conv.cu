// The causal depthwise conv + SiLU of a GDN layer (launch_gdn_conv_silu in kernels.h), with the layer's gates beside.
//
// Steps with a piece of several rows: two kernels on the same stream. The first computes every (row, channel) output
// from the step's inputs and the piece's conv state as it was before the step; the second then rewrites each piece's
// state. Splitting them is what makes the state update safe: no output thread can read a history value after it has
// been overwritten, and the output kernel gets one thread per element, so long prefill pieces use the whole GPU.
// Steps whose pieces all take the decode kernels (one row, or a few rows inside one chunk: a verify piece's last token
// and drafts, delta_chunks.h): one kernel, each thread the outputs and the new state of its own (piece, channel),
// which nothing else reads. Both compute an output with the same fma chain over the same inputs.
// The gates (gdn_gate.h) ride along in one more block per row.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/activations.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/gdn_gate.h"
#include "backend/cuda/kernels.h"

namespace duet::backend::cuda {

namespace {

constexpr int kThreads = 256;

// The conv state of `piece` for GDN layer `layer`: [K-1, channels], oldest first.
__device__ __forceinline__ bf16* conv_state(const DevicePiece& piece, int32_t layer) {
  return piece.conv + static_cast<int64_t>(layer) * piece.conv_layer_stride;
}

// sum_j w[c, j] * x_j in j order (fp32 fma chain), then SiLU, rounded to BF16.
template <int K>
__device__ __forceinline__ bf16 conv_output(const DeviceWeight& w, int32_t c, const bf16 (&x)[K]) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j)
    acc = fmaf(gate_weight_at(w, static_cast<int64_t>(c) * K + j), __bfloat162float(x[j]), acc);
  return __float2bfloat16(silu(acc));
}

// Whether this block is the one past the channel blocks, which computes the gates of rows [row0, row0 + rows) when they
// are asked for.
__device__ __forceinline__ bool gates_block(const GdnGateArrays& gates, int32_t row0, int32_t rows) {
  if (blockIdx.y != gridDim.y - 1 || gates.value_heads <= 0) return false;
  for (int32_t row = row0; row < row0 + rows; ++row)
    for (int32_t h = threadIdx.x; h < gates.value_heads; h += kThreads)
      gdn_gate(gates.b, gates.a, gates.A_log, gates.dt_bias, gates.value_heads,
               static_cast<int64_t>(row) * gates.value_heads + h, gates.beta, gates.g);
  return true;
}

// Eight channels a thread, 16 bytes at a time (conv_rows_wide_kernel); conv_rows_kernel is one a thread.
constexpr int kWideChannels = 8;
// Rows a thread of the wide kernel takes, one after another: a row's window is the row before's shifted by one input
// while both are of one piece, so each input is loaded once for the rows.
constexpr int kWideRows = 4;

union Bf16x8 {
  uint4 raw;
  bf16 v[kWideChannels];
};

// conv_rows_kernel's outputs, eight channels [c, c + 8) a thread and kWideRows rows: each output the same fma chain
// over the same inputs (conv_output), so the same bits. One thread an element took 243 us a layer for a 4K prompt's
// 4,096 x 8,192 outputs on an H100 (46th round, the prefill timeline), 4% of the prefill: about 40 instructions an
// element for a 2-byte load each, where the bytes (67 MB in, 67 MB out) take about 45 us. Needs channels a multiple of
// 8 and in, out and the conv state 16-byte aligned (launch_conv checks; else conv_rows_kernel). Off by default until
// it has run on a GPU (DUET_CONV_WIDE=1).
template <int K>
__global__ void __launch_bounds__(kThreads)
    conv_rows_wide_kernel(DeviceStep step, int32_t layer, DeviceWeight w, int32_t channels, const bf16* in, bf16* out,
                          GdnGateArrays gates) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int32_t row0 = blockIdx.x * kWideRows, rows = min(kWideRows, step.rows - row0);
  if (gates_block(gates, row0, rows)) return;
  const int32_t c = (blockIdx.y * kThreads + threadIdx.x) * kWideChannels;
  if (c >= channels) return;
  float weight[kWideChannels][K];
#pragma unroll
  for (int i = 0; i < kWideChannels; ++i)
#pragma unroll
    for (int j = 0; j < K; ++j) weight[i][j] = gate_weight_at(w, static_cast<int64_t>(c + i) * K + j);
  auto load = [&](const bf16* p) {
    Bf16x8 x;
    x.raw = *reinterpret_cast<const uint4*>(p);
    return x;
  };
  Bf16x8 x[K];  // the window of the row before, while it is of the same piece
  int32_t window_piece = -1;
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t row = row0 + r, p = step.row_piece[row];
    const DevicePiece& piece = step.piece[p];
    const int32_t t = row - piece.first_row;
    if (p == window_piece) {  // shift by one: the new input is this row's own
#pragma unroll
      for (int j = 0; j < K - 1; ++j) x[j] = x[j + 1];
      x[K - 1] = load(in + static_cast<int64_t>(row) * channels + c);
    } else {
      const bf16* state = conv_state(piece, layer);
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int32_t src = t - (K - 1) + j;  // input index inside the piece; negative: from the state
        x[j] = load(src >= 0 ? in + static_cast<int64_t>(piece.first_row + src) * channels + c
                             : state + static_cast<int64_t>(K - 1 + src) * channels + c);
      }
      window_piece = p;
    }
    Bf16x8 y;
#pragma unroll
    for (int i = 0; i < kWideChannels; ++i) {
      float acc = 0.0f;  // conv_output's chain
#pragma unroll
      for (int j = 0; j < K; ++j) acc = fmaf(weight[i][j], __bfloat162float(x[j].v[i]), acc);
      y.v[i] = __float2bfloat16(silu(acc));
    }
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * channels + c) = y.raw;
  }
}

// One thread per (row, channel). Input t - (K-1) + j of the piece is either a row of this step (index >= 0) or, for
// the first K-1 rows, an entry of the state, whose last slot is the input just before the piece.
template <int K>
__global__ void __launch_bounds__(kThreads)
    conv_rows_kernel(DeviceStep step, int32_t layer, DeviceWeight w, int32_t channels, const bf16* in, bf16* out,
                     GdnGateArrays gates) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int32_t row = blockIdx.x;
  if (gates_block(gates, row, 1)) return;
  const int32_t c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= channels) return;
  const DevicePiece& piece = step.piece[step.row_piece[row]];
  const int32_t t = row - piece.first_row;
  const bf16* state = conv_state(piece, layer);
  bf16 x[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int32_t src = t - (K - 1) + j;  // input index inside the piece; negative: from the state
    x[j] = src >= 0 ? in[static_cast<int64_t>(piece.first_row + src) * channels + c]
                    : state[static_cast<int64_t>(K - 1 + src) * channels + c];
  }
  out[static_cast<int64_t>(row) * channels + c] = conv_output<K>(w, c, x);
}

// One thread per (piece, channel): the new state is the last K-1 entries of [old state | piece inputs]. A piece of
// fewer than K-1 rows keeps part of the old state (shifted towards the oldest slot), so every new value is read into
// registers before any slot is written. A snapshot at position s inside the piece (DeviceSnapshot) gets the K-1
// entries before s of the same window, the history a step ending at s leaves, read before the state is written too;
// a rewindable piece (gdn_rewind.h) gets the whole window, for the same reason before the state is written.
template <int K>
__global__ void __launch_bounds__(kThreads)
    conv_state_kernel(DeviceStep step, int32_t layer, int32_t channels, const bf16* in) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  const int32_t c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= channels) return;
  const DevicePiece& piece = step.piece[blockIdx.y];
  bf16* state = conv_state(piece, layer);
  // Entry `src` of [old state (K-1) | inputs].
  auto window = [&](int32_t src) {
    return src < K - 1 ? state[static_cast<int64_t>(src) * channels + c]
                       : in[static_cast<int64_t>(piece.first_row + src - (K - 1)) * channels + c];
  };
  for (int32_t s = piece.first_snapshot; s < piece.first_snapshot + piece.snapshot_count; ++s) {
    const DeviceSnapshot snapshot = step.snapshot[s];
    const int32_t at = snapshot.position - piece.start_position;  // the piece's rows before it
    bf16* kept = snapshot.conv + static_cast<int64_t>(layer) * piece.conv_layer_stride;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) kept[static_cast<int64_t>(j) * channels + c] = window(at + j);
  }
  if (piece.rewind_conv != nullptr) {  // a verify piece's window, for rewinding (gdn_rewind.h)
    bf16* to = piece.rewind_conv + static_cast<int64_t>(layer) * piece.rewind_layer_stride;
    for (int32_t j = 0; j < K - 1 + piece.rows; ++j) to[static_cast<int64_t>(j) * channels + c] = window(j);
  }
  bf16 kept[K - 1];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) kept[j] = window(piece.rows + j);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) state[static_cast<int64_t>(j) * channels + c] = kept[j];
}

// Pieces of one row or a few (up to kDecodePieceRows): one thread per (piece, channel) holds the window [its state's
// K-1 inputs | the piece's rows] in registers, writes each row's output (conv_rows_kernel's: row t reads window
// entries t .. t + K-1), a rewindable piece's whole window (conv_state_kernel's) and then the state: the window's last
// K-1 entries (conv_state_kernel's). Every register index is a constant (the loops over rows are unrolled and guarded),
// so the window never goes to local memory.
template <int K>
__global__ void __launch_bounds__(kThreads)
    conv_decode_kernel(DeviceStep step, int32_t layer, DeviceWeight w, int32_t channels, const bf16* in, bf16* out,
                       GdnGateArrays gates) {
  wait_for_prerequisites();  // dependent_launch.h: nothing is touched before the previous kernel is done,
  let_dependents_launch();   // and only then may the next one be scheduled (one kernel ahead, never a chain)
  constexpr int kMaxRows = kDecodePieceRows;
  const DevicePiece& piece = step.piece[blockIdx.x];
  const int32_t rows = piece.rows;
  if (blockIdx.y == gridDim.y - 1 && gates.value_heads > 0) {  // the piece's rows' gates (gates_block's, flattened)
    const int64_t first = static_cast<int64_t>(piece.first_row) * gates.value_heads;
    for (int32_t i = threadIdx.x; i < rows * gates.value_heads; i += kThreads)
      gdn_gate(gates.b, gates.a, gates.A_log, gates.dt_bias, gates.value_heads, first + i, gates.beta, gates.g);
    return;
  }
  const int32_t c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= channels) return;
  bf16* state = conv_state(piece, layer);
  bf16 x[K - 1 + kMaxRows];  // the window, oldest first
#pragma unroll
  for (int j = 0; j < K - 1; ++j) x[j] = state[static_cast<int64_t>(j) * channels + c];
#pragma unroll
  for (int t = 0; t < kMaxRows; ++t)
    if (t < rows) x[K - 1 + t] = in[static_cast<int64_t>(piece.first_row + t) * channels + c];
#pragma unroll
  for (int t = 0; t < kMaxRows; ++t) {
    if (t < rows) {
      bf16 row_x[K];
#pragma unroll
      for (int j = 0; j < K; ++j) row_x[j] = x[t + j];
      out[static_cast<int64_t>(piece.first_row + t) * channels + c] = conv_output<K>(w, c, row_x);
    }
  }
  if (piece.rewind_conv != nullptr) {  // a verify piece's window (conv_state_kernel's)
    bf16* to = piece.rewind_conv + static_cast<int64_t>(layer) * piece.rewind_layer_stride;
#pragma unroll
    for (int j = 0; j < K - 1 + kMaxRows; ++j)
      if (j < K - 1 + rows) to[static_cast<int64_t>(j) * channels + c] = x[j];
  }
  bf16 kept[K - 1];  // window entries rows .. rows + K-2, picked with constant indices
#pragma unroll
  for (int j = 0; j < K - 1; ++j) kept[j] = x[1 + j];  // one row
#pragma unroll
  for (int r = 2; r <= kMaxRows; ++r)
    if (r == rows)
#pragma unroll
      for (int j = 0; j < K - 1; ++j) kept[j] = x[r + j];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) state[static_cast<int64_t>(j) * channels + c] = kept[j];
}

// Whether conv_rows_wide_kernel takes a step: it can with 16-byte rows of inputs, outputs and every piece's conv
// state (the pieces' states are storage slots of K-1 rows of `channels`, so 16-byte aligned when the channels are a
// multiple of 8), and does unless DUET_CONV_WIDE=0 or a test chose otherwise (prepared in the 46th round; the default
// since the 48th: on an H100 a 1K prompt's prefill +1.9% / +1.2% and 4K +0.9% / +1.9% in two alternating rounds, its
// bits test passed on the 9B's shape).
std::atomic<int32_t> conv_wide_for_tests{-1};
bool conv_rows_wide_takes(int32_t channels, const bf16* in, const bf16* out) {
  static const bool wanted = [] {
    const char* v = std::getenv("DUET_CONV_WIDE");
    return v == nullptr || std::string_view(v) != "0";
  }();
  const int32_t choice = conv_wide_for_tests.load();
  return (choice >= 0 ? choice != 0 : wanted) && channels % kWideChannels == 0 &&
         (reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
}

template <int K>
void launch_conv(const DeviceStep& step, int32_t layer, DeviceWeight w, int32_t channels, const bf16* in, bf16* out,
                 const GdnGateArrays& gates, cudaStream_t stream) {
  const uint32_t channel_blocks = (static_cast<uint32_t>(channels) + kThreads - 1) / kThreads;
  const uint32_t blocks_per_row = channel_blocks + (gates.value_heads > 0 ? 1 : 0);
  // No piece for the chunked form: every piece is one row or a few inside one chunk (delta_chunks.h), none writes a
  // snapshot. (With DUET_VERIFY_ROWS=chunked, only steps of one-row pieces.)
  if (step.multi_pieces == 0 && step.snapshots == 0) {
    launch_dependent("conv_decode_kernel", conv_decode_kernel<K>, dim3(step.pieces, blocks_per_row), kThreads, 0,
                     stream, step, layer, w, channels, in, out, gates);
    check_launch("gdn conv_decode_kernel");
    return;
  }
  if (conv_rows_wide_takes(channels, in, out)) {
    const uint32_t wide_blocks = (static_cast<uint32_t>(channels / kWideChannels) + kThreads - 1) / kThreads;
    launch_dependent("conv_rows_wide_kernel", conv_rows_wide_kernel<K>,
                     dim3((static_cast<uint32_t>(step.rows) + kWideRows - 1) / kWideRows,
                          wide_blocks + (gates.value_heads > 0 ? 1 : 0)),
                     kThreads, 0, stream, step, layer, w, channels, in, out, gates);
    check_launch("gdn conv_rows_wide_kernel");
  } else {
    launch_dependent("conv_rows_kernel", conv_rows_kernel<K>, dim3(step.rows, blocks_per_row), kThreads, 0, stream,
                     step, layer, w, channels, in, out, gates);
    check_launch("gdn conv_rows_kernel");
  }
  launch_dependent("conv_state_kernel", conv_state_kernel<K>, dim3(channel_blocks, step.pieces), kThreads, 0, stream,
                   step, layer, channels, in);
  check_launch("gdn conv_state_kernel");
}

}  // namespace

void set_conv_rows_wide_for_tests(int32_t on) { conv_wide_for_tests.store(on); }

void launch_gdn_conv_silu(const DeviceStep& step, int32_t gdn_layer, DeviceWeight conv_w, int32_t channels,
                          int32_t kernel, const bf16* in, bf16* out, cudaStream_t stream, const GdnGateArrays* gates) {
  if (step.rows <= 0 || step.pieces <= 0 || channels <= 0) return;
  const GdnGateArrays no_gates;
  const GdnGateArrays& g = gates != nullptr ? *gates : no_gates;
  switch (kernel) {
    case 2:
      return launch_conv<2>(step, gdn_layer, conv_w, channels, in, out, g, stream);
    case 3:
      return launch_conv<3>(step, gdn_layer, conv_w, channels, in, out, g, stream);
    case 4:
      return launch_conv<4>(step, gdn_layer, conv_w, channels, in, out, g, stream);
    default:
      check_cuda(cudaErrorInvalidValue, "launch_gdn_conv_silu: conv kernel size must be 2, 3 or 4");
  }
}

}  // namespace duet::backend::cuda
