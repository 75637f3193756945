#pragma once
// bfloat16 as stored in checkpoints: the top 16 bits of an IEEE float32.
#include <bit>
#include <cstdint>

namespace duet {

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Round to nearest even, as torch does; NaN stays a quiet NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

}  // namespace duet
