#include "server/turn_start_hints.h"

#include <optional>
#include <span>
#include <string_view>

namespace duet::server {

// Each header is a turn's `<|im_start|>`, a special token, so the text before it is the prompt's own beginning: the
// points are read off the prompt's ids (where images are already their whole runs of image tokens) rather than by
// encoding three prefixes again on the request thread. A header id's place in the text is the decoded length of the ids
// before it; a tokenizer that writes a header merged into a longer token (tiny-vl's test tokenizer writes
// "\n<|im_start|>assistant\n" as one) has no header id there, and that turn gets no point.
std::vector<int32_t> turn_start_hints(const tokenizer::Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<int32_t>& ids) {
  constexpr std::string_view kTurn = "<|im_start|>";
  const std::optional<int32_t> turn_id = tokenizer.token_to_id(kTurn);
  if (!turn_id) return {};
  const size_t generation = text.rfind(kTurn), last_user = text.rfind("<|im_start|>user");
  const size_t after_system = text.starts_with("<|im_start|>system") ? text.find(kTurn, 1) : std::string::npos;
  std::vector<int32_t> hints;
  size_t offset = 0, from = 0;  // the text's bytes decoded so far: ids [0, from)
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != *turn_id) continue;
    // Decoded between special tokens: a header is ASCII, so no character spans it.
    offset += tokenizer.decode(std::span<const int32_t>(ids).subspan(from, i - from)).size();
    if (text.compare(offset, kTurn.size(), kTurn) != 0) return hints;  // not the text's ids: no more points
    if (i > 0 && (offset == generation || offset == last_user || offset == after_system))
      hints.push_back(static_cast<int32_t>(i));
    offset += kTurn.size();
    from = i + 1;
  }
  return hints;
}

}  // namespace duet::server
