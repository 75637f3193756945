#include "engine/stop_matcher.h"

#include <algorithm>

namespace duet::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& stop) { return stop.empty(); });  // "" would match at once
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result result;
  if (matched_) return result;
  held_.append(text);
  if (stops_.empty()) {
    result.released = std::move(held_);
    held_.clear();
    return result;
  }
  // Any complete stop string starts inside held_: everything released earlier could not begin one.
  size_t earliest = std::string::npos;
  const std::string* earliest_stop = nullptr;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < earliest) {  // the earliest start wins; among equal starts the first listed
      earliest = at;
      earliest_stop = &stop;
    }
  }
  if (earliest_stop != nullptr) {
    matched_ = true;
    result.released = held_.substr(0, earliest);
    result.matched = *earliest_stop;
    held_.clear();
    return result;
  }
  const size_t keep = longest_stop_prefix_suffix();
  result.released = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

// The longest tail of held_ that is a proper prefix of some stop string (could still become a match).
size_t StopMatcher::longest_stop_prefix_suffix() const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    const size_t limit = std::min(held_.size(), stop.size() - 1);
    for (size_t length = limit; length > best; --length) {
      if (std::string_view(held_).substr(held_.size() - length) == std::string_view(stop).substr(0, length)) {
        best = length;
        break;
      }
    }
  }
  return best;
}

}  // namespace duet::engine
