#pragma once
// Token masks: one bit per logit column, bit (id % 32) of word (id / 32) set when the token is allowed. The same
// layout on the CPU sampler and in the CUDA sampling kernel (a row's mask is vocab/32 words).
#include <cstdint>
#include <span>

namespace duet::grammar {

inline void set_bit(std::span<uint32_t> words, int32_t id) {
  words[static_cast<size_t>(id) >> 5] |= 1u << (static_cast<uint32_t>(id) & 31u);
}
inline bool test_bit(std::span<const uint32_t> words, int32_t id) {
  return (words[static_cast<size_t>(id) >> 5] >> (static_cast<uint32_t>(id) & 31u)) & 1u;
}

}  // namespace duet::grammar
