#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace duet::engine {
namespace {

// Feeds pieces; returns everything released and the matched stop (or "" when none matched).
std::pair<std::string, std::string> run(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string released, matched;
  for (const std::string& piece : pieces) {
    StopMatcher::Result result = matcher.push(piece);
    released += result.released;
    if (result.matched) matched = *result.matched;
  }
  if (matched.empty()) released += matcher.flush();
  return {released, matched};
}

TEST(StopMatcher, NoStopsReleasesEverythingAtOnce) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("abc").released, "abc");
  EXPECT_EQ(matcher.held_bytes(), 0u);
}

TEST(StopMatcher, StopInsideOnePiece) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(run(matcher, {"hello STOP world"}), std::make_pair(std::string("hello "), std::string("STOP")));
}

TEST(StopMatcher, StopSpanningSeveralPiecesIsHeldBack) {
  StopMatcher matcher({"</end>"});
  EXPECT_EQ(matcher.push("abc<").released, "abc");  // "<" could begin the stop string
  EXPECT_EQ(matcher.push("/e").released, "");
  const StopMatcher::Result last = matcher.push("nd>tail");
  EXPECT_EQ(last.released, "");
  ASSERT_TRUE(last.matched.has_value());
  EXPECT_EQ(*last.matched, "</end>");
  EXPECT_EQ(matcher.push("more").released, "");  // nothing after a match
}

TEST(StopMatcher, FalseStartIsReleasedOnceItCannotMatch) {
  StopMatcher matcher({"abc"});
  EXPECT_EQ(matcher.push("xab").released, "x");
  EXPECT_EQ(matcher.push("d").released, "abd");
  EXPECT_FALSE(matcher.matched());
}

TEST(StopMatcher, OverlappingPrefixRestarts) {
  StopMatcher matcher({"aab"});
  EXPECT_EQ(run(matcher, {"a", "a", "a", "b", "c"}), std::make_pair(std::string("a"), std::string("aab")));
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher matcher({"world", "lo w"});
  EXPECT_EQ(run(matcher, {"hel", "lo world"}), std::make_pair(std::string("hel"), std::string("lo w")));
}

TEST(StopMatcher, UnfinishedPrefixIsFlushedAtTheEnd) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(run(matcher, {"go ST"}), std::make_pair(std::string("go ST"), std::string()));
}

TEST(StopMatcher, EmptyStopStringIsIgnored) {
  StopMatcher matcher({""});
  EXPECT_EQ(matcher.push("abc").released, "abc");
}

TEST(StopMatcher, MultiByteCharacters) {
  StopMatcher matcher({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(run(matcher, {"un \xC3\xA9", "t", "\xC3\xA9 chaud"}),
            std::make_pair(std::string("un "), std::string("\xC3\xA9t\xC3\xA9")));
}

}  // namespace
}  // namespace duet::engine
