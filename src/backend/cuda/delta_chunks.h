#pragma once
// The chunked delta rule's bookkeeping, shared by the host (which cuts a step's pieces into chunks) and the kernels
// (which find a head's state by it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/device_step.h"

namespace duet::backend::cuda {

// One value head's delta-rule state in a sequence's GDN state, fp32, at the offsets below from its start:
//   S_b   [key_dim][value_dim]  the state at the start of the current chunk
//   keys  [64][key_dim]         the chunk's rows so far: their l2-normalized keys,
//   d     [64][value_dim]       their corrected values d_t,
//   G     [64]                  and their cumulative log decay from the chunk's start.
// A sequence at position p has p % 64 rows of its chunk here; the full state S is
// e^{G_last} S_b + sum_s e^{G_last - G_s} keys_s d_s^T. All zeros is the empty state at position 0.
struct DeltaHeadState {
  int32_t key_dim, value_dim;
  __host__ __device__ int64_t keys() const { return static_cast<int64_t>(key_dim) * value_dim; }
  __host__ __device__ int64_t d() const { return keys() + static_cast<int64_t>(kDeltaChunk) * key_dim; }
  __host__ __device__ int64_t G() const { return d() + static_cast<int64_t>(kDeltaChunk) * value_dim; }
  __host__ __device__ int64_t elems() const { return G() + kDeltaChunk; }
};

// A chunk's scratch per value head: the rows' A and Q matrix rows ([rows][filled + rows] each) and their G.
__host__ __device__ inline int64_t chunk_scratch_elems(int32_t filled, int32_t rows) {
  return 2 * static_cast<int64_t>(rows) * (filled + rows) + rows;
}

// Cuts every piece's rows at the multiples of 64 of their positions, fills each piece's first_chunk / chunk_count
// and returns the chunks in piece order, each with its scratch offset; *scratch_per_head gets the total, which is
// at most (2 * 64 + 1) floats per row.
inline std::vector<DeviceChunk> plan_delta_chunks(std::vector<DevicePiece>& pieces, int64_t* scratch_per_head) {
  std::vector<DeviceChunk> chunks;
  int64_t scratch = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    DevicePiece& p = pieces[i];
    p.first_chunk = static_cast<int32_t>(chunks.size());
    p.chunk_count = 0;
    for (int32_t done = 0; done < p.rows;) {
      const int32_t filled = (p.start_position + done) % kDeltaChunk;
      const int32_t rows = std::min(p.rows - done, kDeltaChunk - filled);
      chunks.push_back(DeviceChunk{static_cast<int32_t>(i), p.first_row + done, rows, filled, scratch});
      scratch += chunk_scratch_elems(filled, rows);
      done += rows;
      ++p.chunk_count;
    }
  }
  *scratch_per_head = scratch;
  return chunks;
}

// The most rows a piece may have to run the decode kernels (a row at a time inside them; gdn_delta_rule.cu's
// decode_rows_kernel): a verify piece's last token and its drafts (K + 1 <= 5) with room to spare. The kernels keep
// every row's vectors in shared memory, so this bounds their size.
constexpr int32_t kDecodePieceRows = 8;

// Whether the decode kernels take `p` when they take pieces of up to `decode_rows` rows: a piece inside one chunk
// (so only its last row can complete the chunk: every row reads the same S_b) that writes no snapshot. decode_rows 1
// is the chunked form for every piece of several rows (DUET_VERIFY_ROWS=chunked).
inline bool decode_kernels_take(const DevicePiece& p, int32_t decode_rows) {
  return p.rows >= 1 && p.rows <= std::min(decode_rows, kDecodePieceRows) && p.chunk_count == 1 &&
         p.snapshot_count == 0;
}

// Whether the chunked form computes a chunk in its WY form (gdn_delta_rule.cu): a prefill piece's chunk from its first
// row (filled 0). Its rows' d come from the chunk's (I + A)^{-1}, computed for all chunks at once, instead of a row
// after another, so their bits differ in the last places from the same rows computed one by one (a decode or verify
// row's way, and a prefill chunk's that starts inside a chunk). Row invariance holds as architecture.md states it: a
// prompt cut at multiples of 64 (the scheduler cuts nowhere else) has the same chunks, and so the same bits, however
// it is cut; decode and verify rows keep the row-by-row form, so a draft's verify row equals the decode row.
__host__ __device__ inline bool wy_form_takes(const DevicePiece& piece, const DeviceChunk& chunk) {
  return piece.role == DeviceRole::prefill && chunk.filled == 0;
}

// The order the delta-rule kernels take pieces and chunks in (DeviceStep::piece_order, chunk_order): those the
// chunked form takes (multi: pieces of more than one row that the decode kernels do not take, and every prefill piece
// that starts a chunk, whose chunks take the WY form whatever their rows) first, then those of pieces of a few rows
// (few), then those of one-row pieces. Every row of a piece gets the same bits in each class, but for the WY form's.
// Among the one-row pieces, those that complete their chunk come first (fold_pieces of them): a kernel of their own
// folds their chunks into the next S_b after the one-row kernel (gdn_delta_rule.cu: fold_chunk_kernel); the others
// follow in step order, or with longest_first by their place in their chunk, latest first: a one-row block reads S_b
// and the chunk's earlier keys and d, so one at place t reads and sums over t rows more than one at place 0, and
// blocks start in launch order, so the longest first would leave the short ones for the last wave (a 64-row step has
// 2,048 blocks of the dense kernel, about three waves). The order moves no bit: a block reads its own piece alone
// (bench_gdn_delta's fingerprints are the same either way, on an H100). Step order stays the default until an A/B has
// timed the other.
struct DeltaOrder {
  std::vector<int32_t> pieces, chunks;
  int32_t multi_pieces = 0, multi_chunks = 0, few_pieces = 0;
  // The fold kernel's width: the one-row pieces that complete their chunk (the first of the one-row pieces) rounded up
  // to a power of two, at most the one-row pieces (its blocks past the completing pieces do nothing). A step graph's
  // key holds it (step_graphs.h), so rounding keeps the graphs of a row count to a few.
  int32_t fold_pieces = 0;
};
// DUET_DELTA_ORDER=longest (read once; for measurements): the one-row pieces that do not fold latest in their chunk
// first.
inline bool one_row_longest_first() {
  static const bool longest = [] {
    const char* v = std::getenv("DUET_DELTA_ORDER");
    return v != nullptr && std::strcmp(v, "longest") == 0;
  }();
  return longest;
}
inline DeltaOrder delta_order(const std::vector<DevicePiece>& pieces, int32_t decode_rows = kDecodePieceRows,
                              bool longest_first = one_row_longest_first()) {
  enum Class { multi, few, one };
  auto class_of = [&](const DevicePiece& p) {
    if (p.role == DeviceRole::prefill && p.start_position % kDeltaChunk == 0) return multi;  // the WY form's
    if (p.rows == 1) return one;  // as before pieces of several rows could take the decode kernels
    return decode_kernels_take(p, decode_rows) ? few : multi;
  };
  auto folds = [](const DevicePiece& p) { return (p.start_position + 1) % kDeltaChunk == 0; };
  DeltaOrder order;
  for (Class c : {multi, few, one})
    for (int pass = 0; pass < (c == one ? 2 : 1); ++pass)  // one-row pieces: those that fold first
      for (size_t i = 0; i < pieces.size(); ++i) {
        const DevicePiece& p = pieces[i];
        if (class_of(p) != c || (c == one && folds(p) != (pass == 0))) continue;
        order.pieces.push_back(static_cast<int32_t>(i));
        for (int32_t k = 0; k < p.chunk_count; ++k) order.chunks.push_back(p.first_chunk + k);
        if (c == multi) ++order.multi_pieces, order.multi_chunks += p.chunk_count;
        if (c == few) ++order.few_pieces;
        if (c == one && pass == 0) ++order.fold_pieces;
      }
  if (longest_first) {
    const auto place = [&](int32_t i) { return pieces[i].start_position % kDeltaChunk; };
    std::stable_sort(order.pieces.begin() + order.multi_pieces + order.few_pieces + order.fold_pieces,
                     order.pieces.end(), [&](int32_t a, int32_t b) { return place(a) > place(b); });
    // A one-row piece has one chunk, and theirs close chunk_order: it follows the pieces.
    const size_t one_row = order.pieces.size() - static_cast<size_t>(order.multi_pieces + order.few_pieces);
    auto chunk = order.chunks.end() - static_cast<std::ptrdiff_t>(one_row);
    for (auto i = order.pieces.end() - static_cast<std::ptrdiff_t>(one_row); i != order.pieces.end(); ++i)
      *chunk++ = pieces[*i].first_chunk;
  }
  if (order.fold_pieces > 0) {
    const auto one_row = static_cast<int32_t>(pieces.size()) - order.multi_pieces - order.few_pieces;
    int32_t width = 1;
    while (width < order.fold_pieces) width *= 2;
    order.fold_pieces = std::min(width, one_row);
  }
  return order;
}

}  // namespace duet::backend::cuda
