#pragma once
// The uniform draw for one sampled token, keyed by (request seed, absolute position). A counter-based hash
// instead of a stateful generator: the draw for a position never depends on what else was sampled before it,
// in this request or in any other sharing the step, so seeded results do not change with batching.
#include <cstdint>

namespace duet::backend {

// SplitMix64's finalizer: a bijective mix with full avalanche, good enough to turn counters into draws.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A double in [0, 1) from the top 53 bits of mix(seed, position); two rounds so that nearby seeds and nearby
// positions land far apart.
constexpr double seeded_uniform(uint64_t seed, int64_t position) {
  const uint64_t bits = mix64(mix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace duet::backend
