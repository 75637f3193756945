#include "engine/counts_sync.h"

#include "base/error.h"

namespace duet::engine {

using Kind = backend::CountsUpdate::Kind;

CountsSync::CountsSync(int32_t slots, int32_t vocab) : held_(static_cast<size_t>(slots)), vocab_(vocab) {}

void CountsSync::sync(int32_t slot, uint64_t sequence, std::span<const int32_t> prompt,
                      std::span<const int32_t> generated, std::vector<backend::CountsUpdate>& out) {
  if (slot < 0 || static_cast<size_t>(slot) >= held_.size())
    fail("engine: penalty counts of slot {} of {}", slot, held_.size());
  Held& held = held_[static_cast<size_t>(slot)];
  const auto send = [&](int32_t id, Kind kind) {
    if (id >= 0 && id < vocab_) out.push_back({slot, id, kind});
  };
  if (!held.known || held.sequence != sequence || held.generated > generated.size()) {
    out.push_back({slot, 0, Kind::clear});
    for (int32_t id : prompt) send(id, Kind::prompt);
    held = {true, sequence, 0};
  }
  for (size_t i = held.generated; i < generated.size(); ++i) send(generated[i], Kind::generated);
  held.generated = generated.size();
}

bool CountsSync::holds(int32_t slot, uint64_t sequence) const {
  if (slot < 0 || static_cast<size_t>(slot) >= held_.size()) return false;
  const Held& held = held_[static_cast<size_t>(slot)];
  return held.known && held.sequence == sequence;
}

void CountsSync::carried(int32_t slot, uint64_t sequence) {
  if (!holds(slot, sequence)) fail("engine: a carried token for penalty counts of slot {} it does not hold", slot);
  ++held_[static_cast<size_t>(slot)].generated;
}

void CountsSync::forget(int32_t slot) {
  if (slot >= 0 && static_cast<size_t>(slot) < held_.size()) held_[static_cast<size_t>(slot)] = {};
}

}  // namespace duet::engine
