#pragma once
// Reading stored weights as fp32. BF16 -> F32 is exact (a shift), so converting on the fly loses nothing.
#include <cstdint>

#include "backend/backend.h"
#include "base/bf16.h"

namespace duet::backend::cpu {

// dst[0, count) = w's elements [first, first + count) (row-major) as fp32.
inline void weight_to_float(const Weight& w, int64_t first, int64_t count, float* dst) {
  if (w.type == WeightType::f32) {
    const float* src = static_cast<const float*>(w.data) + first;
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(w.data) + first;
    for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_float(src[i]);
  }
}

inline float weight_at(const Weight& w, int64_t index) {
  return w.type == WeightType::f32 ? static_cast<const float*>(w.data)[index]
                                   : bf16_to_float(static_cast<const uint16_t*>(w.data)[index]);
}

}  // namespace duet::backend::cpu
