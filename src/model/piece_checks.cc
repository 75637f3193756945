#include "model/piece_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/model.h"

namespace duet::model {

void check_positions(const char* step, size_t index, int32_t position, std::span<const int32_t> tokens,
                     std::span<const int32_t> page_table, const backend::StateStorage& storage,
                     const Qwen35Config& config) {
  auto refuse = [&](std::string reason) {
    throw PieceRefused(index, fmt::format("{}: piece {} {}", step, index, reason));
  };
  if (tokens.empty()) refuse("has no tokens");
  if (position < 0) refuse(fmt::format("starts at position {}", position));
  const int64_t end = static_cast<int64_t>(position) + static_cast<int64_t>(tokens.size());
  const int64_t capacity = static_cast<int64_t>(page_table.size()) * backend::kKvPagePositions;
  if (end > capacity)
    refuse(fmt::format("needs positions up to {}, its {} KV pages hold {}", end, page_table.size(), capacity));
  for (int32_t page : page_table)
    if (page < 0 || page >= storage.pages())
      refuse(fmt::format("names KV page {} of a storage with {}", page, storage.pages()));
  for (int32_t id : tokens)
    if (id < 0 || id >= config.vocab_size)
      refuse(fmt::format("has token id {} outside the vocabulary [0, {})", id, config.vocab_size));
}

void check_snapshots(const char* step, size_t index, const Piece& piece, const backend::StateStorage& storage) {
  if (piece.snapshots.empty()) return;
  auto refuse = [&](std::string reason) {
    throw PieceRefused(index, fmt::format("{}: piece {} {}", step, index, reason));
  };
  if (!storage.snapshots_inside_steps())
    refuse(fmt::format("asks for GDN snapshots inside its rows, which the {} backend does not take",
                       storage.owner() != nullptr ? storage.owner()->name() : "this"));
  if (piece.role != backend::RowRole::prefill || piece.rewindable)
    refuse("asks for GDN snapshots inside decode rows (only prefill pieces take them)");
  const int64_t end = static_cast<int64_t>(piece.position) + static_cast<int64_t>(piece.tokens.size());
  int64_t last = piece.position;
  for (const backend::StepSnapshot& s : piece.snapshots) {
    if (s.position % backend::kKvPagePositions != 0 || s.position <= last || s.position > end)
      refuse(fmt::format("asks for a GDN snapshot at position {}: not a block end after {} and up to {}", s.position,
                         last, end));
    if (s.snapshot < 0 || s.snapshot >= storage.snapshots())
      refuse(fmt::format("asks for GDN snapshot {} of a storage with {}", s.snapshot, storage.snapshots()));
    last = s.position;
  }
}

void check_image_inputs(const char* step, size_t index, const Piece& piece, const Qwen35Config& config,
                        const backend::AttentionShape& shape, const backend::Backend& backend) {
  if (piece.image_rows.empty() && piece.rope_positions.empty() && piece.rope_delta == 0) return;  // text
  auto refuse = [&](std::string reason) {
    throw PieceRefused(index, fmt::format("{}: piece {} {}", step, index, reason));
  };
  if (!backend.applies_mrope())
    refuse(
        fmt::format("carries an image's rows or 3-D positions, which the {} backend does not read (it does not "
                    "apply M-RoPE)",
                    backend.name()));
  if (!piece.rope_positions.empty()) {
    if (shape.rope_streams.empty())
      refuse("carries 3-D positions, but this model's config has no usable rope_parameters.mrope_section");
    if (piece.rope_positions.size() != 3 * piece.tokens.size())
      refuse(fmt::format("carries {} 3-D position values for {} tokens (3 each)", piece.rope_positions.size(),
                         piece.tokens.size()));
  }
  if (piece.image_rows.empty()) return;
  if (config.image_token_id < 0) refuse("carries image rows, but this model has no image token");
  const auto h = static_cast<size_t>(config.hidden_size);
  const auto image_tokens =
      static_cast<size_t>(std::count(piece.tokens.begin(), piece.tokens.end(), config.image_token_id));
  if (piece.image_rows.size() != image_tokens * h)
    refuse(fmt::format("carries {} values of image rows for {} image tokens (id {}) of {} values each",
                       piece.image_rows.size(), image_tokens, config.image_token_id, h));
}

}  // namespace duet::model
