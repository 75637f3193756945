#pragma once
// The checks every run of one sequence's positions passes before a step writes anything (the main forward's pieces
// and the MTP layer's), so that a refused step leaves every sequence as it was.
#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "model/qwen35_config.h"

namespace duet::model {

// Throws PieceRefused(index, "<step>: piece <index> ...") for a run with no tokens, a negative position, a page
// table too short for its positions or naming a page outside `storage`, or an id outside the vocabulary.
void check_positions(const char* step, size_t index, int32_t position, std::span<const int32_t> tokens,
                     std::span<const int32_t> page_table, const backend::StateStorage& storage,
                     const Qwen35Config& config);

}  // namespace duet::model
