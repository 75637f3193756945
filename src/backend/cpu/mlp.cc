// SwiGLU MLP on the CPU: down(silu(gate(x)) * up(x)), fp32.
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/scalar_math.h"

namespace duet::backend::cpu {

void mlp(const MlpWeights& w, const CpuActivations& x, CpuActivations& out) {
  const int64_t rows = x.rows(), ffn = w.gate_proj.rows;
  std::vector<float> gate(static_cast<size_t>(rows * ffn)), up(static_cast<size_t>(rows * ffn));
  matmul(x.values.data(), rows, w.gate_proj, gate.data());
  matmul(x.values.data(), rows, w.up_proj, up.data());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
  matmul(gate.data(), rows, w.down_proj, out.values.data());
}

}  // namespace duet::backend::cpu
