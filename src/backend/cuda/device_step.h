#pragma once
// A step as the CUDA kernels see it: built on the host once per step and copied to the device in one transfer
// (CudaBackend::begin_step). Every kernel that needs to know which sequence, position or state a row belongs to
// reads it from here, so no kernel launch depends on host-side per-piece loops.
#include <cuda_bf16.h>

#include <cstdint>

namespace duet::backend::cuda {

using bf16 = __nv_bfloat16;

// What a piece's rows are computing; it picks kernels (decode rows: the batch-invariant skinny GEMM), never
// results of other rows.
enum class DeviceRole : int32_t { prefill = 0, decode = 1 };

struct DevicePiece {
  int32_t first_row = 0;  // rows [first_row, first_row + rows) of the step
  int32_t rows = 0;
  int32_t start_position = 0;  // the sequence position of its first row
  int32_t page_offset = 0;     // its page table: DeviceStep::page_table[page_offset .. + page_count)
  int32_t page_count = 0;
  DeviceRole role = DeviceRole::prefill;
  // The sequence's GDN state for GDN layer g is at  conv + g * conv_layer_stride  and  delta + g * delta_layer_stride:
  //   conv:  [conv_kernel - 1, conv_channels] bf16, the last pre-conv inputs, oldest first (zeros at the start)
  //   delta: [value_heads][delta_head_elems(key_dim, value_dim)] fp32, each head's chunked state (DeltaHeadState)
  bf16* conv = nullptr;
  float* delta = nullptr;
  int64_t conv_layer_stride = 0;   // elements
  int64_t delta_layer_stride = 0;  // elements
  // The K/V pages of the storage this sequence's pages are in. For attention layer l, page p, offset o (0..63),
  // KV head h:  key   at kv + ((l * pages + p) * 2 + 0) * page_elems + (o * kv_heads + h) * head_dim
  //             value at kv + ((l * pages + p) * 2 + 1) * page_elems + (o * kv_heads + h) * head_dim
  // with page_elems = 64 * kv_heads * head_dim (see kv_key / kv_value below).
  bf16* kv = nullptr;
  int64_t kv_pages = 0;  // pages in that storage (per layer)
  // The piece's delta-rule chunks: DeviceStep::chunk[first_chunk .. + chunk_count).
  int32_t first_chunk = 0;
  int32_t chunk_count = 0;
  // The GDN snapshots it writes on its way (prefill pieces of several rows): DeviceStep::snapshot[first_snapshot ..
  // + snapshot_count), in position order.
  int32_t first_snapshot = 0;
  int32_t snapshot_count = 0;
  // A rewindable piece (verify rows, gdn_rewind.h): the conv kernels write its window [history before the step | its
  // inputs] for GDN layer g at  rewind_conv + g * rewind_layer_stride  ([K-1 + rows][conv_channels] bf16); null for
  // any other piece.
  bf16* rewind_conv = nullptr;
  int64_t rewind_layer_stride = 0;
};

// A GDN snapshot taken inside a step (backend::StepSnapshot): when its piece's rows reach `position` (a chunk end), the
// piece's GDN state as a step ending there would leave it goes to `conv` / `delta`, laid out like the piece's own
// state (its layer strides): the conv kernel writes the history, the delta-rule walk each head's state.
struct DeviceSnapshot {
  int32_t position = 0;
  bf16* conv = nullptr;
  float* delta = nullptr;
};

// The delta rule runs in its chunked form over chunks of 64 positions that start at multiples of 64, for every row
// (gdn_delta_rule.cu). A sequence's delta-rule state per GDN layer and value head is the state S_b at the start of
// its current chunk plus what the chunk's rows so far left (delta_chunks.h: DeltaHeadState). A DeviceChunk is the
// rows of one piece that fall in one chunk: rows [filled, filled + rows) of it, the first `filled` already in the
// state.
constexpr int32_t kDeltaChunk = 64;
struct DeviceChunk {
  int32_t piece = 0;
  int32_t first_row = 0;  // step rows [first_row, first_row + rows)
  int32_t rows = 0;       // 1 .. 64 - filled
  int32_t filled = 0;     // rows of the chunk before them (0 .. 63)
  int64_t scratch = 0;    // where its matrices start in the step's chunk scratch, in floats per value head
};
struct DeviceStep {
  int32_t pieces = 0;
  int32_t rows = 0;
  const DevicePiece* piece = nullptr;     // [pieces]
  const int32_t* row_piece = nullptr;     // [rows] the piece of each row
  const int32_t* row_position = nullptr;  // [rows] the sequence position of each row
  // [rows][3] each row's rotary positions (time, height, width: M-RoPE, docs/vision.md 5), in steps where a piece
  // carries 3-D positions or a rope delta (backend::StepPiece); null in every other step, whose rows rotate at
  // row_position. Only attention prep reads it: K/V and the causal span follow row_position either way.
  const int32_t* row_rope = nullptr;
  const int32_t* page_table = nullptr;  // every piece's page ids, position order, concatenated
  int32_t chunks = 0;                   // delta-rule chunks of all pieces
  const DeviceChunk* chunk = nullptr;   // [chunks]
  // The pieces and chunks the chunked form takes first (pieces of several rows: chunk_state_kernel's), then those of
  // pieces of a few rows inside one chunk (decode_rows_kernel's, delta_chunks.h: decode_kernels_take), then those of
  // one-row pieces (decode_delta_kernel's or decode_dense_kernel's), those that complete their chunk first: indices
  // into piece and chunk.
  const int32_t* piece_order = nullptr;  // [pieces]
  const int32_t* chunk_order = nullptr;  // [chunks]
  int32_t multi_pieces = 0, multi_chunks = 0;
  int32_t few_pieces = 0;  // 0 unless pieces of a few rows take the decode kernels (not DUET_VERIFY_ROWS=chunked)
  // The one-row pieces that complete their chunk (the first of the one-row pieces in piece_order): after the one-row
  // kernel, fold_chunk_kernel folds their chunks into the next S_b (delta_chunks.h: DeltaOrder::fold_pieces).
  int32_t fold_pieces = 0;
  // Rows of decode pieces (DeviceRole::decode), when the host counted them: attention then leaves out the kernels
  // that would find no row of theirs. -1: not counted, every attention kernel launches and sorts rows by role.
  int32_t decode_rows = -1;
  int32_t snapshots = 0;                     // GDN snapshots written inside this step
  const DeviceSnapshot* snapshot = nullptr;  // [snapshots], each piece's in DevicePiece::first_snapshot order
};

constexpr int32_t kPagePositions = 64;

__host__ __device__ inline int64_t kv_page_elems(int32_t kv_heads, int32_t head_dim) {
  return static_cast<int64_t>(kPagePositions) * kv_heads * head_dim;
}
// Where position `pos` of KV head `h` of attention layer `layer` lives for piece `p`.
__host__ __device__ inline bf16* kv_key(const DevicePiece& p, const int32_t* page_table, int32_t layer, int32_t pos,
                                        int32_t h, int32_t kv_heads, int32_t head_dim) {
  const int64_t page = page_table[p.page_offset + pos / kPagePositions];
  const int64_t block = (static_cast<int64_t>(layer) * p.kv_pages + page) * 2;
  return p.kv + block * kv_page_elems(kv_heads, head_dim) +
         (static_cast<int64_t>(pos % kPagePositions) * kv_heads + h) * head_dim;
}
__host__ __device__ inline bf16* kv_value(const DevicePiece& p, const int32_t* page_table, int32_t layer, int32_t pos,
                                          int32_t h, int32_t kv_heads, int32_t head_dim) {
  return kv_key(p, page_table, layer, pos, h, kv_heads, head_dim) + kv_page_elems(kv_heads, head_dim);
}

}  // namespace duet::backend::cuda
