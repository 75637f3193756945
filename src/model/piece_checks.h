#pragma once
// The checks every run of one sequence's positions passes before a step writes anything (the main forward's pieces
// and the MTP layer's), so that a refused step leaves every sequence as it was.
#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "model/qwen35_config.h"

namespace duet::model {

struct Piece;

// Throws PieceRefused(index, "<step>: piece <index> ...") for a run with no tokens, a negative position, a page
// table too short for its positions or naming a page outside `storage`, or an id outside the vocabulary.
void check_positions(const char* step, size_t index, int32_t position, std::span<const int32_t> tokens,
                     std::span<const int32_t> page_table, const backend::StateStorage& storage,
                     const Qwen35Config& config);

// Throws PieceRefused for a piece whose snapshots inside the step (Piece::snapshots) cannot be taken: on a storage
// without them (named by its backend), on a decode or rewindable piece, off a block end inside its rows, out of
// order, or naming a snapshot the storage lacks.
void check_snapshots(const char* step, size_t index, const Piece& piece, const backend::StateStorage& storage);

// Throws PieceRefused for a piece whose image inputs (Piece::image_rows, rope_positions, rope_delta) the step cannot
// take: on a backend that does not apply M-RoPE (named), on a model without an image token or M-RoPE streams, image
// rows that are not one per image token of the piece, or 3-D positions that are not three per token.
void check_image_inputs(const char* step, size_t index, const Piece& piece, const Qwen35Config& config,
                        const backend::AttentionShape& shape, const backend::Backend& backend);

}  // namespace duet::model
