#pragma once
// Prompt lookup (`--draft ngram`): drafts copied from earlier in the sequence. Where the last n tokens occurred before
// (in the prompt or the reply so far), the tokens that followed them then are proposed next. No weights: it pays where
// replies repeat their input (code edits, retrieval answers, quoting), and costs one verify row per draft elsewhere.
#include <cstdint>
#include <span>
#include <vector>

namespace duet::engine {

// Up to `count` drafts for the tokens after `sequence` (prompt then reply): the longest suffix of n tokens, n from
// `longest` down to 1, that occurred earlier, its latest earlier occurrence; empty when none recurs.
std::vector<int32_t> ngram_drafts(std::span<const int32_t> sequence, int32_t count, int32_t longest = 3);

}  // namespace duet::engine
