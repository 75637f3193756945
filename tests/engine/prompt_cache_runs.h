#pragma once
// The prompt cache below the engine, shared by the backends' tests (tests/engine/prompt_cache_rows_test.cc on the
// CPU, tests/cuda/prompt_cache_cuda_test.cc on the GPU): a prompt resumed from a cached block end computes the same
// final-norm rows and logits as the same prompt computed fresh, byte for byte, at several block boundaries and beside
// another sequence in the same step. Planted controls: a snapshot restored one block off, and a planted hash
// collision (every block hashes alike), where only the token comparison keeps the right state.
#include <gtest/gtest.h>

#include "../model/piece_runs.h"
#include "engine/piece_runner.h"
#include "engine/prompt_cache.h"

namespace duet::engine::testing {

using duet::testing::Rows;
using duet::testing::same_bytes;

inline int32_t vocab_of(const model::Model& model) { return static_cast<int32_t>(model.config().vocab_size); }
inline constexpr auto kAll = model::RowOutput::all_logits | model::RowOutput::norm_rows;

inline std::vector<int32_t> prompt_of(size_t length, uint32_t seed, int32_t vocab) {
  std::vector<int32_t> ids(length);
  for (size_t i = 0; i < length; ++i) ids[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % vocab);
  return ids;
}

inline std::vector<int32_t> concat(std::span<const int32_t> a, std::span<const int32_t> b) {
  std::vector<int32_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Prefills `prompt` a block at a time on a fresh sequence, leaving its state at every block end to the cache.
inline void warm(PieceRunner& runner, PromptCache& cache, std::span<const int32_t> prompt) {
  const int32_t slot = runner.open();
  for (size_t done = 0; done + 64 <= prompt.size(); done += 64) {
    runner.run(model::Piece{.slot = slot, .tokens = prompt.subspan(done, 64), .wants = model::RowOutput::none});
    cache.insert(0, prompt.first(done + 64), slot);
  }
  runner.close(slot);
}

// Resumes `prompt` from the cached pages and snapshot given, and computes the rest in one piece (beside another
// sequence's prefill when `neighbour`).
inline Rows resumed_rows(PieceRunner& runner, std::span<const int32_t> pages, int32_t snapshot,
                         std::span<const int32_t> prompt, bool neighbour = false) {
  const int32_t slot = runner.resume(pages, snapshot);
  const auto from = static_cast<size_t>(runner.position(slot));
  std::vector<model::Piece> step{{.slot = slot, .tokens = prompt.subspan(from), .wants = kAll}};
  const std::vector<int32_t> other(100, 7);
  int32_t other_slot = -1;
  if (neighbour) {
    other_slot = runner.open();
    step.insert(step.begin(), model::Piece{.slot = other_slot, .tokens = other, .wants = kAll});
  }
  const auto out = runner.run(step);
  const model::PieceResult& mine = out[neighbour ? 1 : 0];
  runner.close(slot);
  if (neighbour) runner.close(other_slot);
  return {mine.norm_rows, mine.logits};
}

// The rows of `prompt` from position `from` on, computed fresh (64-token pieces, a sequence of its own).
inline Rows fresh_rows(model::Model& model, std::span<const int32_t> prompt, size_t from) {
  const Rows all = duet::testing::run_in_pieces(model, prompt, {64});
  const size_t h = all.norm_rows.size() / prompt.size(), v = all.logits.size() / prompt.size();
  return {{all.norm_rows.begin() + static_cast<std::ptrdiff_t>(from * h), all.norm_rows.end()},
          {all.logits.begin() + static_cast<std::ptrdiff_t>(from * v), all.logits.end()}};
}

inline void expect_resumed_equals_fresh_at_several_block_boundaries(model::Model& model) {
  PieceRunner runner(model, 3, 512, 0, /*snapshots=*/8);
  PromptCache cache(runner.blocks(), runner.storage(), 8, 64);
  const std::vector<int32_t> base = prompt_of(200, 1, vocab_of(model));
  warm(runner, cache, base);  // entries at 64, 128 and 192
  for (size_t blocks : {1, 2, 3}) {
    const std::vector<int32_t> prompt = concat(
        std::span(base).first(blocks * 64), prompt_of(37 + blocks, 2 + static_cast<uint32_t>(blocks), vocab_of(model)));
    const auto hit = cache.lookup(0, prompt);
    ASSERT_TRUE(hit) << blocks;
    ASSERT_EQ(hit->tokens(), static_cast<int64_t>(blocks * 64));
    const Rows resumed = resumed_rows(runner, hit->pages, hit->snapshot, prompt, /*neighbour=*/blocks == 2);
    const Rows fresh = fresh_rows(model, prompt, blocks * 64);
    ASSERT_FALSE(fresh.logits.empty());
    EXPECT_TRUE(same_bytes(resumed.norm_rows, fresh.norm_rows)) << blocks << " blocks resumed";
    EXPECT_TRUE(same_bytes(resumed.logits, fresh.logits)) << blocks << " blocks resumed";
  }
  // A prompt that ends on a block end resumes one block earlier: its last token is always prefilled.
  const auto whole = cache.lookup(0, std::span(base).first(128));
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->tokens(), 64);
  // Another salt (the adapter) finds nothing.
  EXPECT_FALSE(cache.lookup(1, base));
  // Every sequence is closed: only the cache's references hold pages, three of them.
  EXPECT_EQ(runner.blocks().free_pages(), runner.blocks().pages() - 3);
}

inline void expect_a_snapshot_one_block_off_to_fail(model::Model& model) {
  PieceRunner runner(model, 2, 512, 0, /*snapshots=*/4);
  PromptCache cache(runner.blocks(), runner.storage(), 4, 64);
  const std::vector<int32_t> base = prompt_of(150, 3, vocab_of(model));
  warm(runner, cache, base);
  const std::vector<int32_t> prompt = concat(std::span(base).first(128), prompt_of(40, 4, vocab_of(model)));
  const auto two = cache.lookup(0, prompt);
  const auto one = cache.lookup(0, std::span(prompt).first(100));
  ASSERT_TRUE(two && one);
  ASSERT_EQ(two->tokens(), 128);
  ASSERT_EQ(one->tokens(), 64);
  const Rows fresh = fresh_rows(model, prompt, 128);
  // The right pairing equals fresh; the snapshot of block 1 under the pages of blocks 1-2 must not.
  const Rows right = resumed_rows(runner, two->pages, two->snapshot, prompt);
  EXPECT_TRUE(same_bytes(right.norm_rows, fresh.norm_rows));
  const Rows off = resumed_rows(runner, two->pages, one->snapshot, prompt);
  EXPECT_FALSE(same_bytes(off.norm_rows, fresh.norm_rows)) << "a snapshot one block off went unnoticed";
  EXPECT_FALSE(same_bytes(off.logits, fresh.logits));
}

inline void expect_a_planted_collision_caught_by_the_tokens(model::Model& model) {
  PieceRunner runner(model, 2, 512, 0, /*snapshots=*/4);
  // Every block of every prompt hashes alike: only the token comparison tells entries apart.
  PromptCache cache(runner.blocks(), runner.storage(), 4, 64,
                    [](uint64_t, std::span<const int32_t>) { return uint64_t{42}; });
  const std::vector<int32_t> a = prompt_of(64, 5, vocab_of(model)), c = prompt_of(64, 6, vocab_of(model)),
                             d = prompt_of(64, 7, vocab_of(model));
  warm(runner, cache, a);
  warm(runner, cache, c);
  const std::vector<int32_t> tail = prompt_of(30, 8, vocab_of(model));
  const std::vector<int32_t> prompt_c = concat(c, tail);
  const auto hit_c = cache.lookup(0, prompt_c);
  const auto hit_a = cache.lookup(0, concat(a, tail));
  ASSERT_TRUE(hit_c && hit_a);
  EXPECT_NE(hit_c->snapshot, hit_a->snapshot);
  EXPECT_FALSE(cache.lookup(0, concat(d, tail))) << "same hash, other tokens: no hit";
  const Rows fresh = fresh_rows(model, prompt_c, 64);
  EXPECT_TRUE(same_bytes(resumed_rows(runner, hit_c->pages, hit_c->snapshot, prompt_c).norm_rows, fresh.norm_rows));
  // The control: what the collision would hand out without the comparison (a's state for c's prompt) differs.
  EXPECT_FALSE(same_bytes(resumed_rows(runner, hit_a->pages, hit_a->snapshot, prompt_c).norm_rows, fresh.norm_rows));
}

inline void expect_eviction_by_recent_use_and_page_budget(model::Model& model) {
  PieceRunner runner(model, 2, 512, 0, /*snapshots=*/2);
  PromptCache cache(runner.blocks(), runner.storage(), 2, /*max_pages=*/3);
  const std::vector<int32_t> a = prompt_of(64, 9, vocab_of(model)), b = prompt_of(64, 10, vocab_of(model)),
                             c = prompt_of(64, 11, vocab_of(model));
  warm(runner, cache, a);
  warm(runner, cache, b);
  ASSERT_TRUE(cache.lookup(0, concat(a, std::vector<int32_t>{1})));  // a is now the more recent
  warm(runner, cache, c);                                            // two snapshots: b, the least recently used, goes
  EXPECT_TRUE(cache.lookup(0, concat(a, std::vector<int32_t>{1})));
  EXPECT_FALSE(cache.lookup(0, concat(b, std::vector<int32_t>{1})));
  EXPECT_TRUE(cache.lookup(0, concat(c, std::vector<int32_t>{1})));
  EXPECT_EQ(cache.stats().evictions, 1);
  // A prefix of four pages is over the budget of three: it is not kept, and its pages go back.
  warm(runner, cache, prompt_of(256, 12, vocab_of(model)));
  EXPECT_LE(cache.stats().pages_held, 3);
  EXPECT_EQ(runner.blocks().free_pages(), runner.blocks().pages() - cache.stats().pages_held);
}

}  // namespace duet::engine::testing
