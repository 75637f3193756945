#pragma once
// What a decide request does with its prompt's rows. A decision is one prefill and no decoding: as each prefill
// chunk is computed, its final-norm rows go to the request's sink, which keeps what the decision head needs of them
// (src/decision: the memory projection of every row, sums over spans, the last row) and lets the rest go, so the
// fp32 rows of a long prompt are never all held. After the last chunk the sink runs the head once; its logits come
// back in the request's one FinishedEvent.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace duet::engine {

// What a decision's sink keeps of a prompt prefix [0, positions) that holds no span (the head keeps only the memory
// rows of such positions). The prompt cache keeps one beside the backbone's state at a block end, so that the next
// decision about the same state resumes there: N decisions about one state prefill it once.
class DecisionPrefix {
 public:
  virtual ~DecisionPrefix() = default;
  virtual int64_t positions() const = 0;
};

// A DecisionPrefix on its way: the prompt cache holds it from the step whose chunk reached the block end; a decision
// worker sets it once the sink has taken those rows (in the sink's task order). Only a set one resumes a decision.
class PendingDecisionPrefix {
 public:
  void set(std::shared_ptr<const DecisionPrefix> prefix) {
    std::lock_guard lock(mutex_);
    prefix_ = std::move(prefix);
  }
  std::shared_ptr<const DecisionPrefix> get() const {
    std::lock_guard lock(mutex_);
    return prefix_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const DecisionPrefix> prefix_;
};

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

  // The prompt cache (engine/prompt_cache.h). The positions before the first span: a prefix of at most these may be
  // kept and resumed; 0 when this sink keeps none.
  virtual int64_t prefix_limit() const { return 0; }
  // What the sink holds of positions [0, positions) (at most prefix_limit(), every row of them taken). Called on a
  // decision worker in the sink's task order, after the rows up to there; null when it keeps none.
  virtual std::shared_ptr<const DecisionPrefix> keep_prefix(int64_t /*positions*/) { return nullptr; }
  // The sink starts from `prefix`, kept by another decision's sink of the same kind whose prompt began with the same
  // ids, as if it had taken those rows itself; the rows after it follow. Called on the engine thread before any rows
  // (cheap: the copy is made when the first rows come).
  virtual void resume_from(std::shared_ptr<const DecisionPrefix> /*prefix*/) {}
};

}  // namespace duet::engine
