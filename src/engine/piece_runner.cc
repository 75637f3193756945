#include "engine/piece_runner.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

namespace {
int64_t pages_or_default(int64_t pages, int32_t slots, int32_t max_positions) {
  return pages > 0 ? pages : slots * BlockManager::pages_for(max_positions);
}
}  // namespace

PieceRunner::PieceRunner(model::Model& model, int32_t slots, int32_t max_positions, int64_t pages, int64_t snapshots)
    : model_(model),
      max_positions_(max_positions),
      storage_(model.new_state_storage(slots, pages_or_default(pages, slots, max_positions), snapshots)),
      blocks_(slots, pages_or_default(pages, slots, max_positions)),
      limits_(static_cast<size_t>(slots), 0) {
  if (max_positions <= 0) fail("piece runner: max_positions = {} must be positive", max_positions);
}

int32_t PieceRunner::open(int32_t max_positions) {
  const std::optional<int32_t> slot = blocks_.acquire(0);
  if (!slot) fail("piece runner: all {} sequence slots are lent", blocks_.slots());
  storage_->reset_slot(*slot);  // a reused slot starts as empty as a fresh one (row invariance)
  limits_[static_cast<size_t>(*slot)] = max_positions > 0 ? max_positions : max_positions_;
  return *slot;
}

int32_t PieceRunner::resume(std::span<const int32_t> shared, int32_t snapshot, int32_t max_positions) {
  const std::optional<int32_t> slot = blocks_.acquire(static_cast<int64_t>(shared.size()), shared);
  if (!slot) fail("piece runner: all {} sequence slots are lent", blocks_.slots());
  storage_->restore_snapshot(snapshot, *slot);
  limits_[static_cast<size_t>(*slot)] = max_positions > 0 ? max_positions : max_positions_;
  return *slot;
}

void PieceRunner::close(int32_t slot) { blocks_.release(slot); }

std::vector<model::PieceResult> PieceRunner::run(std::span<const model::Piece> pieces) {
  return model_.collect(launch(pieces));
}

std::unique_ptr<model::Model::Launched> PieceRunner::launch(std::span<const model::Piece> pieces, bool hold_masks) {
  std::vector<model::Piece> filled(pieces.begin(), pieces.end());
  int64_t more_pages = 0;
  std::vector<int32_t> seen;
  for (size_t i = 0; i < filled.size(); ++i) {
    const int32_t slot = filled[i].slot;
    // Refused here, before a table grows: a slot's page table must stay put while the step reads it.
    if (std::find(seen.begin(), seen.end(), slot) != seen.end())
      throw model::PieceRefused(i, fmt::format("piece runner: piece {} repeats a sequence already in this step", i));
    seen.push_back(slot);
    const int64_t end = blocks_.position(slot) + static_cast<int64_t>(filled[i].tokens.size());
    if (end > limits_[static_cast<size_t>(slot)])
      throw model::PieceRefused(i, fmt::format("piece runner: piece {} needs positions up to {}, its sequence holds {}",
                                               i, end, limits_[static_cast<size_t>(slot)]));
    more_pages += BlockManager::pages_for(end) - static_cast<int64_t>(blocks_.table(slot).size());
  }
  if (more_pages > blocks_.free_pages() - blocks_.reserved_pages())
    fail("forward: the step needs {} more KV pages, {} of {} are free", more_pages, blocks_.free_pages(),
         blocks_.pages());
  for (model::Piece& piece : filled) {
    const int64_t position = blocks_.position(piece.slot);
    blocks_.cover(piece.slot, position + static_cast<int64_t>(piece.tokens.size()));
    blocks_.check_writable(piece.slot, position, position + static_cast<int64_t>(piece.tokens.size()));
    piece.page_table = blocks_.table(piece.slot);
    piece.position = static_cast<int32_t>(position);
  }
  std::unique_ptr<model::Model::Launched> launched =
      hold_masks ? model_.launch_holding_masks(*storage_, filled) : model_.launch(*storage_, filled);
  for (const model::Piece& piece : filled) blocks_.advance(piece.slot, static_cast<int64_t>(piece.tokens.size()));
  return launched;
}

void PieceRunner::rewind(int32_t slot, int64_t position) {
  storage_->rewind(slot, position);
  blocks_.advance(slot, position - blocks_.position(slot));
}

void PieceRunner::fork(int32_t from, int32_t to) {
  const auto copies = blocks_.fork(from, to);
  for (const auto& [source, target] : copies) storage_->copy_pages(std::span(&source, 1), std::span(&target, 1));
  storage_->copy_slot(from, to);
  limits_[static_cast<size_t>(to)] = limits_[static_cast<size_t>(from)];
}

}  // namespace duet::engine
