#include "server/turn_start_hints.h"

#include <algorithm>
#include <optional>
#include <string_view>

namespace duet::server {

// Each is a turn's `<|im_start|>`, a special token that the tokenizer never merges with
// its neighbours, so the n-th one in the text is the n-th one in the ids: the positions are read off the ids rather
// than by encoding three prefixes again (up to three re-tokenizations of a long prompt on the request thread). Empty
// when the counts differ (a tokenizer without the token as one id): no hints, only the engine's own cache points.
std::vector<int32_t> turn_start_hints(const tokenizer::Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<int32_t>& ids) {
  constexpr std::string_view kTurn = "<|im_start|>";
  const std::optional<int32_t> turn_id = tokenizer.token_to_id(kTurn);
  if (!turn_id) return {};
  std::vector<size_t> text_turns;  // byte offsets of every turn header
  for (size_t at = text.find(kTurn); at != std::string::npos; at = text.find(kTurn, at + kTurn.size()))
    text_turns.push_back(at);
  std::vector<int32_t> id_turns;  // token positions of every turn header
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == *turn_id) id_turns.push_back(static_cast<int32_t>(i));
  if (text_turns.size() != id_turns.size() || text_turns.empty()) return {};
  // Indices into the turn lists: the last turn (the generation prompt), the last user turn, the turn after a leading
  // system turn.
  std::vector<size_t> turns{text_turns.size() - 1};
  for (size_t n = text_turns.size(); n-- > 0;)
    if (text.compare(text_turns[n], kTurn.size() + 4, "<|im_start|>user") == 0) {
      turns.push_back(n);
      break;
    }
  if (text.starts_with("<|im_start|>system") && text_turns.size() > 1) turns.push_back(1);
  std::vector<int32_t> hints;
  for (size_t n : turns)
    if (id_turns[n] > 0) hints.push_back(id_turns[n]);
  std::sort(hints.begin(), hints.end());
  hints.erase(std::unique(hints.begin(), hints.end()), hints.end());
  return hints;
}

}  // namespace duet::server
