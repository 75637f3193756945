// SwiGLU MLP on the CPU: down(silu(gate(x)) * up(x)), fp32.
#include <vector>

#include "backend/cpu/adapted_projection.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/scalar_math.h"

namespace duet::backend::cpu {

void mlp(const MlpWeights& w, const CpuActivations& x, std::span<const StepPiece> pieces, CpuActivations& out) {
  const int64_t rows = x.rows(), ffn = w.gate_proj.rows;
  std::vector<float> gate(static_cast<size_t>(rows * ffn)), up(static_cast<size_t>(rows * ffn));
  project(x.values.data(), rows, w.gate_proj, w.adapter.gate_proj, pieces, gate.data());
  project(x.values.data(), rows, w.up_proj, w.adapter.up_proj, pieces, up.data());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
  project(gate.data(), rows, w.down_proj, w.adapter.down_proj, pieces, out.values.data());
}

}  // namespace duet::backend::cpu
