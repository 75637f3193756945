#pragma once
// A stored tensor's values as fp32 (BF16 widened exactly), for the conversion tools.
#include <vector>

#include "checkpoint/safetensors.h"

namespace duet::convert {

// Refuses (naming the tensor) a dtype other than BF16 or F32.
std::vector<float> values_of(const checkpoint::TensorView& t);
// Round to nearest even, the bits torch's cast gives (base/bf16.h).
std::vector<uint16_t> to_bf16(const std::vector<float>& values);

}  // namespace duet::convert
