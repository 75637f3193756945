#pragma once
// What the engine tells the backend's storage about its penalized sequences' tokens (backend/penalty_counts.h): each
// token once, when the sequence next samples, so a step's cost is the tokens new since the last one, not the context.
// A slot's counts belong to the sequence whose ids were last sent there; a slot that another sequence held (or that was
// forgotten) starts over: clear, the prompt, every token generated so far.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/penalty_counts.h"

namespace duet::engine {

class CountsSync {
 public:
  CountsSync(int32_t slots, int32_t vocab);

  // Appends to `out` what brings `slot`'s counts to this sequence's `prompt` and `generated` (all of it, in order).
  // Ids outside [0, vocab) are skipped: no count reads them (the samplers skip them too).
  void sync(int32_t slot, uint64_t sequence, std::span<const int32_t> prompt, std::span<const int32_t> generated,
            std::vector<backend::CountsUpdate>& out);
  // Whether the slot's counts are this sequence's, each of its tokens counted once.
  bool holds(int32_t slot, uint64_t sequence) const;
  // The device added the sequence's next token to the slot's counts (a penalized row launched ahead reads its token
  // where it was drawn: backend::CarriedId::counts_slot): counted as sent, so that the next sync does not send it
  // again. Only while holds(slot, sequence).
  void carried(int32_t slot, uint64_t sequence);
  // The slot's counts are unknown (an update batch failed): its next sync starts over.
  void forget(int32_t slot);

 private:
  struct Held {
    bool known = false;
    uint64_t sequence = 0;
    size_t generated = 0;  // tokens of `sequence`'s generated already sent
  };
  std::vector<Held> held_;  // [slots]
  int32_t vocab_;
};

}  // namespace duet::engine
