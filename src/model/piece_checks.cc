#include "model/piece_checks.h"

#include <fmt/format.h>

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

}  // namespace duet::model
