// Prompt lookup (engine/ngram_drafter.h): the longest recurring suffix (3 tokens down to 1), its latest earlier
// occurrence, the tokens after it; nothing when the suffix never recurred.
#include "engine/ngram_drafter.h"

#include <gtest/gtest.h>

namespace duet::engine {
namespace {

TEST(NgramDrafts, CopiesWhatFollowedTheLongestRecurringSuffix) {
  // "1 2 3" recurs: what followed it (4 5 6) is drafted, not what followed "3" alone later (9).
  const std::vector<int32_t> sequence = {1, 2, 3, 4, 5, 6, 3, 9, 1, 2, 3};
  EXPECT_EQ(ngram_drafts(sequence, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(ngram_drafts(sequence, 2), (std::vector<int32_t>{4, 5}));
}

TEST(NgramDrafts, TheLatestOccurrenceAndShorterSuffixes) {
  // "7 8" occurred twice: the later continuation (2) wins; only the 1-token suffix "5" recurs in the second case.
  EXPECT_EQ(ngram_drafts(std::vector<int32_t>{7, 8, 1, 7, 8, 2, 7, 8}, 1), (std::vector<int32_t>{2}));
  EXPECT_EQ(ngram_drafts(std::vector<int32_t>{5, 6, 4, 9, 5}, 4), (std::vector<int32_t>{6, 4, 9, 5}));
}

TEST(NgramDrafts, NothingWhenNothingRecurs) {
  EXPECT_TRUE(ngram_drafts(std::vector<int32_t>{1, 2, 3, 4}, 3).empty());
  EXPECT_TRUE(ngram_drafts(std::vector<int32_t>{1}, 3).empty());
  EXPECT_TRUE(ngram_drafts(std::vector<int32_t>{}, 3).empty());
  EXPECT_TRUE(ngram_drafts(std::vector<int32_t>{1, 1}, 0).empty());
}

}  // namespace
}  // namespace duet::engine
