#pragma once
// design/targets.md: tiny models on the CPU within 1e-4 relative of transformers FP32 (the vision tests' gate).
namespace duet::model {
inline constexpr double kCpuGate = 1e-4;
}  // namespace duet::model
