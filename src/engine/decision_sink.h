#pragma once
// What a decide request does with its prompt's rows. A decision is one prefill and no decoding: as each prefill
// chunk is computed, its final-norm rows go to the request's sink, which keeps what the decision head needs of them
// (src/decision: the memory projection of every row, sums over spans, the last row) and lets the rest go, so the
// fp32 rows of a long prompt are never all held. After the last chunk the sink runs the head once; its logits come
// back in the request's one FinishedEvent.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace duet::engine {

class DecisionSink {
 public:
  virtual ~DecisionSink() = default;
  // rows: [count, hidden] fp32 final-norm rows of prompt positions [first, first + count). Called on a decision
  // worker, in position order, once per prefill chunk.
  virtual void add_rows(int64_t first, int64_t count, std::span<const float> rows) = 0;
  // Called once after the last chunk, on a decision worker (engine.cc): the decision's logits.
  virtual std::vector<float> finish() = 0;
  // Where the sink reads its rows on the backend's device instead (a head on the GPU): the engine hands this to
  // the model (Piece::rows_to) and never calls add_rows. finish() still runs on a decision worker.
  virtual backend::RowConsumer* device_rows() { return nullptr; }
};

}  // namespace duet::engine
