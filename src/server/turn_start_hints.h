#pragma once
// The points of a chat prompt where its turns start, which the prompt cache keeps besides its own
// (engine::Request::cache_hints): a conversation's next request repeats the text up to one of them.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace duet::server {

// Where a rendered chat prompt's generation prompt, last user turn and the turn after its leading system turn start,
// as sorted token positions of `ids` (the tokenization of `text`), leaving out position 0: the points the prompt cache
// keeps besides its own (engine::Request::cache_hints). A turn whose header is not its own id in `ids` has none.
std::vector<int32_t> turn_start_hints(const tokenizer::Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<int32_t>& ids);

}  // namespace duet::server
