#include "engine/step_snapshots.h"

namespace duet::engine {

StepSnapshots::~StepSnapshots() {
  for (const Reserved& r : reserved_) cache_.release(r.snapshot);
}

std::span<const backend::StepSnapshot> StepSnapshots::reserve(size_t piece, uint64_t salt,
                                                              std::span<const int32_t> prompt,
                                                              std::span<const ImageCacheKey> images,
                                                              std::span<const int32_t> points, int64_t start,
                                                              int64_t end, int32_t slot, bool decides,
                                                              size_t decision_bytes_per_position) {
  std::vector<backend::StepSnapshot>& requests = requests_.at(piece);
  for (int32_t point : points) {
    if (point <= start || point >= end || point - test_shift_ <= start) continue;
    const std::span<const int32_t> prefix = prompt.first(static_cast<size_t>(point));
    if (const std::optional<int32_t> snapshot = cache_.reserve(salt, prefix, images)) {
      requests.push_back({.position = point - test_shift_, .snapshot = *snapshot});
      reserved_.push_back({*snapshot, salt, prefix, images, slot, piece,
                           decides ? std::make_shared<PendingDecisionPrefix>() : nullptr,
                           decides ? static_cast<size_t>(point) * decision_bytes_per_position : 0});
    }
  }
  return requests;
}

std::vector<StepSnapshots::DecisionEntry> StepSnapshots::commit() {
  // Taken out first: a commit that throws leaves the rest to the destructor to give back.
  std::vector<Reserved> reserved;
  reserved.swap(reserved_);
  std::vector<DecisionEntry> decisions;
  for (size_t i = 0; i < reserved.size(); ++i) {
    const Reserved& r = reserved[i];
    try {
      if (cache_.commit(r.snapshot, r.salt, r.prefix, r.slot, r.images, r.decision, r.decision_bytes) && r.decision)
        decisions.push_back({r.piece, static_cast<int64_t>(r.prefix.size()), r.decision});
    } catch (...) {
      reserved_.assign(reserved.begin() + static_cast<std::ptrdiff_t>(i) + 1, reserved.end());
      throw;
    }
  }
  return decisions;
}

}  // namespace duet::engine
