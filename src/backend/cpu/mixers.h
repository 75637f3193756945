#pragma once
// The CPU backend's sublayers over a step's rows (see backend/backend.h for the contracts).
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_state.h"

namespace duet::backend::cpu {

// snapshots[p][i]: where piece p's StepPiece::snapshots[i] goes (this layer's state in that snapshot).
void gdn_mixer(const GdnWeights& w, const GdnShape& shape, const CpuActivations& x, std::span<const StepPiece> pieces,
               std::span<CpuGdnState* const> states, std::span<CpuGdnRewind* const> rewinds,
               std::span<const std::vector<CpuGdnState*>> snapshots, CpuActivations& out);

void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, const CpuActivations& x,
                     std::span<const StepPiece> pieces, std::span<const CpuKvCache> caches, CpuActivations& out);

void mlp(const MlpWeights& w, const CpuActivations& x, std::span<const StepPiece> pieces, CpuActivations& out);

}  // namespace duet::backend::cpu
