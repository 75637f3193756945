// What the engine sends a storage's penalty counts (engine/counts_sync.h), applied to host counts as the CPU backend
// applies them and compared with the counts written out by hand from the sequences' tokens: each token sent once (a
// step sends only what is new), ids outside the vocabulary skipped, and a slot that another sequence held, or that was
// forgotten, cleared and sent again from the prompt on. The control: the same steps without the clear leave the old
// sequence's ids in the slot.
#include "engine/counts_sync.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "base/error.h"

namespace duet::engine {
namespace {

using backend::CountsUpdate;

// The counts of a sequence, by hand: id -> (in the prompt, times generated).
std::map<int32_t, std::pair<bool, uint32_t>> expected(const std::vector<int32_t>& prompt,
                                                      const std::vector<int32_t>& generated, int32_t vocab) {
  std::map<int32_t, std::pair<bool, uint32_t>> out;
  for (int32_t id : prompt)
    if (id >= 0 && id < vocab) out[id].first = true;
  for (int32_t id : generated)
    if (id >= 0 && id < vocab) ++out[id].second;
  return out;
}

std::map<int32_t, std::pair<bool, uint32_t>> held(const backend::PenaltyCounts& counts) {
  std::map<int32_t, std::pair<bool, uint32_t>> out;
  for (const auto& [id, word] : counts.words()) out[id] = {counts.in_prompt(id), counts.generated(id)};
  return out;
}

TEST(CountsSync, EachTokenOnceAndAReusedSlotStartsOver) {
  constexpr int32_t kVocab = 50;
  CountsSync sync(2, kVocab);
  std::vector<backend::PenaltyCounts> counts(2);
  const auto step = [&](int32_t slot, uint64_t sequence, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& generated, bool drop_clears = false) {
    std::vector<CountsUpdate> updates;
    sync.sync(slot, sequence, prompt, generated, updates);
    if (drop_clears) std::erase_if(updates, [](const CountsUpdate& u) { return u.kind == CountsUpdate::Kind::clear; });
    backend::apply_counts_updates(updates, kVocab, counts);
    return updates.size();
  };
  const std::vector<int32_t> prompt = {3, 4, 3, 60, -1};  // 60 and -1 outside the vocabulary
  std::vector<int32_t> generated;
  EXPECT_EQ(step(0, 7, prompt, generated), 1u + 3u) << "a clear and the prompt's ids inside the vocabulary";
  for (int32_t id : {4, 9, 9, 70, 12}) {
    generated.push_back(id);
    const size_t sent = step(0, 7, prompt, generated);
    EXPECT_EQ(sent, id < kVocab ? 1u : 0u) << "only the new token";
    EXPECT_EQ(held(counts[0]), expected(prompt, generated, kVocab));
  }
  EXPECT_EQ(step(0, 7, prompt, generated), 0u) << "nothing new";
  generated.insert(generated.end(), {5, 5});  // two tokens since the last step (a verify step's)
  EXPECT_EQ(step(0, 7, prompt, generated), 2u);
  EXPECT_EQ(held(counts[0]), expected(prompt, generated, kVocab));

  // Slot 0 goes to another sequence: cleared, then its prompt and its tokens so far (a fork's first one).
  const std::vector<int32_t> other_prompt = {1, 2}, other_generated = {2};
  step(0, 8, other_prompt, other_generated);
  EXPECT_EQ(held(counts[0]), expected(other_prompt, other_generated, kVocab));
  EXPECT_TRUE(held(counts[1]).empty()) << "slot 1 untouched";

  // A forgotten slot (a failed batch) starts over even for the same sequence.
  sync.forget(0);
  EXPECT_EQ(step(0, 8, other_prompt, other_generated), 1u + 2u + 1u);
  EXPECT_EQ(held(counts[0]), expected(other_prompt, other_generated, kVocab));

  // The control: without the clear, the previous sequence's ids stay in a reused slot.
  step(1, 9, prompt, generated);
  step(1, 10, other_prompt, other_generated, true);
  EXPECT_NE(held(counts[1]), expected(other_prompt, other_generated, kVocab));
}

// Tokens the device added (rows launched ahead, backend::CarriedId::counts_slot) are taken as sent: the next sync sends
// only what came after them, and the counts hold each token once. Only for the sequence whose counts the slot holds.
TEST(CountsSync, CarriedTokensAreNotSentAgain) {
  constexpr int32_t kVocab = 50;
  CountsSync sync(2, kVocab);
  std::vector<backend::PenaltyCounts> counts(2);
  const std::vector<int32_t> prompt = {3, 4};
  std::vector<int32_t> generated = {7};
  std::vector<CountsUpdate> updates;
  sync.sync(0, 5, prompt, generated, updates);
  EXPECT_FALSE(sync.holds(0, 6)) << "another sequence";
  EXPECT_FALSE(sync.holds(1, 5)) << "another slot";
  EXPECT_FALSE(sync.holds(7, 5)) << "no such slot";
  ASSERT_TRUE(sync.holds(0, 5));
  // Two steps launched ahead carry 8 and 9 into the counts on the device; the host reads them afterwards.
  for (int32_t id : {8, 9}) {
    sync.carried(0, 5);
    updates.push_back({0, id, CountsUpdate::Kind::generated});  // what the device added
    generated.push_back(id);
  }
  generated.push_back(10);  // the last ahead step's own draw, read on the host
  const size_t before = updates.size();
  sync.sync(0, 5, prompt, generated, updates);
  ASSERT_EQ(updates.size(), before + 1) << "only the token the device did not add";
  EXPECT_EQ(updates.back().id, 10);
  backend::apply_counts_updates(updates, kVocab, counts);
  EXPECT_EQ(held(counts[0]), expected(prompt, generated, kVocab)) << "each token once";
  EXPECT_THROW(sync.carried(1, 5), Error) << "a slot whose counts it does not hold";
}

}  // namespace
}  // namespace duet::engine
