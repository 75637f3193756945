#pragma once
// Stop strings over streamed text. Text arrives a token at a time; a stop string may span several tokens, so
// the matcher holds back any tail that could still grow into a stop string and releases it once it cannot.
// On a match, the text before the stop string is released and the stop string and everything after it is
// dropped.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace duet::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string released;                // text safe to send now
    std::optional<std::string> matched;  // the stop string that ended the text, if one did
  };
  // Adds streamed text. After a match, further pushes release nothing.
  Result push(std::string_view text);
  // The held-back tail, released when generation ends for another reason.
  std::string flush();

  bool matched() const { return matched_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  size_t longest_stop_prefix_suffix() const;

  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace duet::engine
