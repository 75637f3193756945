// Which delta-rule kernels take a step's pieces (delta_chunks.h: delta_order) and which chunks take the WY form
// (wy_form_takes): host code, no GPU. A prefill piece that starts a chunk goes to the chunked form whatever its rows,
// so that its chunks take the WY form as the same prompt's chunks do when it is cut elsewhere at a multiple of 64;
// decode and verify pieces, and prefill pieces entered in a chunk's middle, keep their kernels and the row-by-row form.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/delta_chunks.h"

namespace duet::backend::cuda {
namespace {

DevicePiece piece(DeviceRole role, int32_t rows, int32_t start) {
  DevicePiece p;
  p.role = role;
  p.rows = rows;
  p.start_position = start;
  return p;
}

std::vector<DevicePiece> with_rows(std::vector<DevicePiece> pieces) {
  int32_t row = 0;
  for (DevicePiece& p : pieces) {
    p.first_row = row;
    row += p.rows;
  }
  return pieces;
}

TEST(DeltaOrder, PrefillPiecesFromAChunkStartTakeTheChunkedForm) {
  std::vector<DevicePiece> pieces = with_rows({
      piece(DeviceRole::prefill, 1, 128),   // 0: a prompt's last row, cut at 128: the chunked form (WY)
      piece(DeviceRole::prefill, 5, 70),    // 1: inside one chunk, from its middle: the few-row kernel
      piece(DeviceRole::decode, 1, 64),     // 2: a decode row at a chunk start: the one-row kernel
      piece(DeviceRole::decode, 4, 0),      // 3: a verify piece at a chunk start: the few-row kernel
      piece(DeviceRole::prefill, 130, 40),  // 4: three chunks from the middle of one: the chunked form
      piece(DeviceRole::prefill, 1, 37),    // 5: one prefill row inside a chunk: the one-row kernel
  });
  int64_t scratch = 0;
  const std::vector<DeviceChunk> chunks = plan_delta_chunks(pieces, &scratch);
  const DeltaOrder order = delta_order(pieces, kDecodePieceRows, false);
  EXPECT_EQ(order.pieces, (std::vector<int32_t>{0, 4, 1, 3, 2, 5}));
  EXPECT_EQ(order.multi_pieces, 2);
  EXPECT_EQ(order.multi_chunks, 1 + 3);
  EXPECT_EQ(order.few_pieces, 2);

  // The WY form: a prefill piece's chunks from their first row, nothing else.
  auto wy = [&](int32_t i) {
    std::vector<bool> takes;
    for (int32_t c = pieces[i].first_chunk; c < pieces[i].first_chunk + pieces[i].chunk_count; ++c)
      takes.push_back(wy_form_takes(pieces[i], chunks[c]));
    return takes;
  };
  EXPECT_EQ(wy(0), (std::vector<bool>{true}));
  EXPECT_EQ(wy(1), (std::vector<bool>{false}));
  EXPECT_EQ(wy(2), (std::vector<bool>{false}));
  EXPECT_EQ(wy(3), (std::vector<bool>{false}));
  EXPECT_EQ(wy(4), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(wy(5), (std::vector<bool>{false}));
}

// The control: the same one-row piece at 128 as a decode row takes the one-row kernel (the test above sees roles).
TEST(DeltaOrder, TheSameRowAsADecodeRowTakesTheOneRowKernel) {
  std::vector<DevicePiece> pieces = with_rows({piece(DeviceRole::decode, 1, 128), piece(DeviceRole::prefill, 64, 0)});
  int64_t scratch = 0;
  plan_delta_chunks(pieces, &scratch);
  const DeltaOrder order = delta_order(pieces);
  EXPECT_EQ(order.pieces, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(order.multi_pieces, 1);
  EXPECT_EQ(order.few_pieces, 0);
}

// One-row pieces that complete their chunk (position 63 of it) come first among the one-row pieces, in step order,
// then the others in step order (or latest in their chunk first); the other classes keep step order (a few-row piece
// ending a chunk folds in its own kernel, so it is not counted).
TEST(DeltaOrder, OneRowPiecesThatFoldComeFirst) {
  std::vector<DevicePiece> pieces = with_rows({
      piece(DeviceRole::decode, 1, 37),    // 0
      piece(DeviceRole::decode, 1, 127),   // 1: completes its chunk
      piece(DeviceRole::decode, 3, 61),    // 2: a verify piece ending at 63: the few-row kernel, not moved
      piece(DeviceRole::decode, 1, 64),    // 3
      piece(DeviceRole::prefill, 1, 63),   // 4: completes its chunk
      piece(DeviceRole::decode, 1, 1000),  // 5
  });
  int64_t scratch = 0;
  plan_delta_chunks(pieces, &scratch);
  const DeltaOrder order = delta_order(pieces, kDecodePieceRows, false);
  EXPECT_EQ(order.pieces, (std::vector<int32_t>{2, 1, 4, 0, 3, 5}));
  EXPECT_EQ(order.chunks, (std::vector<int32_t>{2, 1, 4, 0, 3, 5}));
  EXPECT_EQ(order.few_pieces, 1);
  EXPECT_EQ(order.fold_pieces, 2);
  // DUET_DELTA_ORDER=longest: the pieces that do not fold latest in their chunk first (5 at place 40, 0 at 37, 3 at 0).
  const DeltaOrder longest = delta_order(pieces, kDecodePieceRows, true);
  EXPECT_EQ(longest.pieces, (std::vector<int32_t>{2, 1, 4, 5, 0, 3}));
  EXPECT_EQ(longest.chunks, (std::vector<int32_t>{2, 1, 4, 5, 0, 3}));
  EXPECT_EQ(longest.fold_pieces, 2);
}

// DUET_DELTA_ORDER=longest: without a piece at a chunk's last position the one-row pieces go latest in their chunk
// first, ties in step order, and their chunks with them where a piece before them has several chunks (piece 1's 130
// rows: chunks 1-3).
TEST(DeltaOrder, OneRowPiecesMayGoLatestInTheirChunkFirst) {
  std::vector<DevicePiece> pieces = with_rows({piece(DeviceRole::decode, 1, 37), piece(DeviceRole::prefill, 130, 40),
                                               piece(DeviceRole::decode, 1, 126), piece(DeviceRole::decode, 1, 128),
                                               piece(DeviceRole::decode, 1, 101)});
  int64_t scratch = 0;
  const std::vector<DeviceChunk> chunks = plan_delta_chunks(pieces, &scratch);
  const DeltaOrder order = delta_order(pieces, kDecodePieceRows, true);
  EXPECT_EQ(order.pieces, (std::vector<int32_t>{1, 2, 0, 4, 3}));  // places 62, 37, 37, 0
  EXPECT_EQ(order.chunks, (std::vector<int32_t>{1, 2, 3, 4, 0, 6, 5}));
  for (size_t i = order.multi_chunks; i < order.chunks.size(); ++i)  // each one-row piece's own chunk, in its place
    EXPECT_EQ(chunks[order.chunks[i]].piece, order.pieces[i - order.multi_chunks + order.multi_pieces]);
  EXPECT_EQ(order.fold_pieces, 0);
  // The control: in step order.
  EXPECT_EQ(delta_order(pieces, kDecodePieceRows, false).pieces, (std::vector<int32_t>{1, 0, 2, 3, 4}));
}

// The fold kernel's width: the completing pieces rounded up to a power of two, at most the one-row pieces.
TEST(DeltaOrder, TheFoldWidthIsAPowerOfTwoWithinTheOneRowPieces) {
  auto width = [](std::vector<int32_t> starts) {
    std::vector<DevicePiece> pieces;
    for (int32_t start : starts) pieces.push_back(piece(DeviceRole::decode, 1, start));
    pieces = with_rows(pieces);
    int64_t scratch = 0;
    plan_delta_chunks(pieces, &scratch);
    return delta_order(pieces).fold_pieces;
  };
  EXPECT_EQ(width({63, 5, 6, 7, 8}), 1);
  EXPECT_EQ(width({63, 127, 191, 5, 6, 7, 8}), 4);
  EXPECT_EQ(width({63, 127, 191, 5}), 4);
  EXPECT_EQ(width({63, 127, 191}), 3);
  EXPECT_EQ(width({5, 6}), 0);
}

}  // namespace
}  // namespace duet::backend::cuda
