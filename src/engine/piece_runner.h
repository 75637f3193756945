#pragma once
// Sequences run by hand, for tools and tests: a block manager over a state storage of the model, where the caller
// names each piece's slot and tokens and the runner fills in its pages and position, runs the step, and advances.
// The engine does the same through its scheduler; this is the shortest correct way to drive Model::forward.
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "engine/block_manager.h"
#include "model/model.h"

namespace duet::engine {

class PieceRunner {
 public:
  // `pages` 0: as many as `slots` sequences of `max_positions` need.
  PieceRunner(model::Model& model, int32_t slots, int32_t max_positions, int64_t pages = 0, int64_t snapshots = 0);

  // A free slot (the lowest), its GDN state reset; its sequence may hold up to `max_positions` positions (0: the
  // runner's). Throws when every slot is lent. Pages are not reserved: they are taken as the sequence grows.
  int32_t open(int32_t max_positions = 0);
  // A free slot resumed from a prompt cache entry: `shared` pages (a whole number of blocks, its position becomes
  // their end) and GDN snapshot `snapshot` restored into it.
  int32_t resume(std::span<const int32_t> shared, int32_t snapshot, int32_t max_positions = 0);
  void close(int32_t slot);  // its pages go back unless shared
  // Runs one step: pieces name their slot, tokens and outputs; page_table and position are filled in here. Throws
  // model::PieceRefused (nothing moved) for a piece past its sequence's max_positions, and duet::Error when the
  // pool has too few free pages.
  std::vector<model::PieceResult> run(std::span<const model::Piece> pieces);
  std::vector<model::PieceResult> run(const model::Piece& piece) { return run(std::span(&piece, 1)); }
  // run() in two halves (model::Model::launch, collect): the step's positions are taken at launch, so the next step
  // may be launched (its pieces carrying this one's draws) before this one is collected. `hold_masks`: through
  // Model::launch_holding_masks (its masked draws wait for Model::release_masks).
  std::unique_ptr<model::Model::Launched> launch(std::span<const model::Piece> pieces, bool hold_masks = false);
  std::vector<model::PieceResult> collect(std::unique_ptr<model::Model::Launched> step) {
    return model_.collect(std::move(step));
  }
  // `to` (opened, empty) becomes `from`'s fork: full pages shared, the page still filling and the GDN slot copied.
  void fork(int32_t from, int32_t to);
  // Takes back the rows of the slot's last step (a rewindable piece, model::Piece::rewindable) from `position` on: its
  // GDN state (backend::StateStorage::rewind) and its position.
  void rewind(int32_t slot, int64_t position);

  int64_t position(int32_t slot) const { return blocks_.position(slot); }
  BlockManager& blocks() { return blocks_; }
  backend::StateStorage& storage() { return *storage_; }

 private:
  model::Model& model_;
  int32_t max_positions_;
  std::unique_ptr<backend::StateStorage> storage_;
  BlockManager blocks_;
  std::vector<int32_t> limits_;  // per slot: the most positions its sequence may hold
};

}  // namespace duet::engine
