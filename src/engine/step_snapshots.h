#pragma once
// The prompt-cache entries a step makes inside its prefill pieces (issue 18), on a backend that takes GDN snapshots
// there (backend::StateStorage::snapshots_inside_steps): instead of ending a step at each block end the cache keeps,
// the engine asks the step to write the state at that block end into a reserved snapshot, and after the step commits
// it as the prefix's entry. One per step, engine thread only. Whatever it reserved and did not commit (the step threw
// or was refused) goes back to the cache when it is destroyed, so a failed step leaks no snapshot.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/image_cache_key.h"
#include "engine/prompt_cache.h"

namespace duet::engine {

class StepSnapshots {
 public:
  // `pieces`: the step's piece count (each piece's requests stay at one address while this lives).
  // `test_shift`: EngineOptions::test_step_snapshot_shift (a planted fault).
  StepSnapshots(PromptCache& cache, size_t pieces, int32_t test_shift = 0)
      : cache_(cache), requests_(pieces), test_shift_(test_shift) {}
  ~StepSnapshots();
  StepSnapshots(const StepSnapshots&) = delete;
  StepSnapshots& operator=(const StepSnapshots&) = delete;

  // Piece `piece` runs `prompt`'s positions [start, end) on `slot`: a snapshot for each of `points` strictly inside
  // (a point at `end` is kept after the step as before, from the slot itself). Returns the piece's requests
  // (model::Piece::snapshots); a prefix already cached, or no snapshot to be had, is left out. A decision's piece
  // (`decides`) makes entries that also hold its sink's prefix (PromptCache::insert's `decision`, counted at
  // decision_bytes_per_position), set once the sink has taken the rows: commit() says which.
  std::span<const backend::StepSnapshot> reserve(size_t piece, uint64_t salt, std::span<const int32_t> prompt,
                                                 std::span<const ImageCacheKey> images, std::span<const int32_t> points,
                                                 int64_t start, int64_t end, int32_t slot, bool decides = false,
                                                 size_t decision_bytes_per_position = 0);
  // A decision's entry that commit() made: its sink's prefix of `positions` goes into `pending` (the engine asks the
  // sink for it after the step's rows, DecisionSink::keep_prefix).
  struct DecisionEntry {
    size_t piece;
    int64_t positions;
    std::shared_ptr<PendingDecisionPrefix> pending;
  };
  // After the step ran: every reserved snapshot becomes its prefix's entry. Returns the decisions' entries.
  std::vector<DecisionEntry> commit();

 private:
  struct Reserved {
    int32_t snapshot;
    uint64_t salt;
    std::span<const int32_t> prefix;
    std::span<const ImageCacheKey> images;
    int32_t slot;
    size_t piece;
    std::shared_ptr<PendingDecisionPrefix> decision;  // a decision's piece: its sink's prefix, set after the step
    size_t decision_bytes;
  };
  PromptCache& cache_;
  std::vector<std::vector<backend::StepSnapshot>> requests_;  // by piece
  std::vector<Reserved> reserved_;
  int32_t test_shift_;
};

}  // namespace duet::engine
