#include "engine/ngram_drafter.h"

#include <algorithm>

namespace duet::engine {

std::vector<int32_t> ngram_drafts(std::span<const int32_t> sequence, int32_t count, int32_t longest) {
  const auto length = static_cast<int64_t>(sequence.size());
  for (int64_t n = std::min<int64_t>(longest, length - 1); n >= 1 && count > 0; --n) {
    const std::span<const int32_t> suffix = sequence.last(static_cast<size_t>(n));
    // The latest occurrence that ends before the suffix starts to overlap itself: scanning back from the end, the
    // nearest repetition is the likeliest to continue alike.
    for (int64_t start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), sequence.begin() + start)) continue;
      const int64_t from = start + n, to = std::min(length, from + count);
      return {sequence.begin() + from, sequence.begin() + to};
    }
  }
  return {};
}

}  // namespace duet::engine
