// The block manager on its own: slots, page tables, reference counts, reservations, forks and the references the
// prompt cache holds. Every count is checked against an independent tally of what the test did.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "base/error.h"

namespace duet::engine {
namespace {

// Every page is either free or referenced, never both; references add up to what tables and retains hold.
void expect_consistent(const BlockManager& blocks, const std::vector<int32_t>& lent,
                       const std::vector<int32_t>& retained = {}) {
  std::vector<int32_t> expected(static_cast<size_t>(blocks.pages()), 0);
  for (int32_t slot : lent)
    for (int32_t page : blocks.table(slot)) ++expected[static_cast<size_t>(page)];
  for (int32_t page : retained) ++expected[static_cast<size_t>(page)];
  int64_t free = 0;
  for (int32_t page = 0; page < blocks.pages(); ++page) {
    EXPECT_EQ(blocks.references(page), expected[static_cast<size_t>(page)]) << "page " << page;
    free += expected[static_cast<size_t>(page)] == 0 ? 1 : 0;
  }
  EXPECT_EQ(blocks.free_pages(), free);
  EXPECT_GE(blocks.free_pages(), blocks.reserved_pages()) << "a promise the pool cannot keep";
}

TEST(BlockManager, AcquireCoverReleaseLowestIdsFirst) {
  BlockManager blocks(3, 10);
  EXPECT_EQ(BlockManager::pages_for(0), 0);
  EXPECT_EQ(BlockManager::pages_for(64), 1);
  EXPECT_EQ(BlockManager::pages_for(65), 2);
  const auto a = blocks.acquire(4), b = blocks.acquire(3);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0);
  EXPECT_EQ(*b, 1);
  EXPECT_EQ(blocks.reserved_pages(), 7);
  blocks.cover(*a, 100);  // 2 pages
  blocks.cover(*b, 64);   // 1 page
  blocks.cover(*a, 128);  // still 2
  EXPECT_EQ(blocks.table(*a), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(blocks.table(*b), (std::vector<int32_t>{2}));
  EXPECT_EQ(blocks.reserved_pages(), 4);
  expect_consistent(blocks, {*a, *b});
  blocks.release(*a);
  EXPECT_EQ(blocks.free_slots(), 2);
  EXPECT_EQ(blocks.reserved_pages(), 2) << "a's unused reservation goes with it";
  expect_consistent(blocks, {*b});
  const auto c = blocks.acquire(1);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, 0) << "the lowest free slot";
  blocks.cover(*c, 1);
  EXPECT_EQ(blocks.table(*c), (std::vector<int32_t>{0})) << "the lowest free page";
}

TEST(BlockManager, ReservationsRefuseWhatThePoolCannotKeep) {
  BlockManager blocks(4, 8);
  const auto a = blocks.acquire(5);
  ASSERT_TRUE(a);
  EXPECT_FALSE(blocks.can_acquire(4)) << "5 + 4 pages promised out of 8";
  EXPECT_FALSE(blocks.acquire(4));
  EXPECT_EQ(blocks.free_slots(), 3) << "a refusal changes nothing";
  EXPECT_EQ(blocks.reserved_pages(), 5);
  const auto b = blocks.acquire(3);
  ASSERT_TRUE(b);
  // b may grow past its reservation only into pages nobody was promised: none are left.
  blocks.cover(*b, 3 * 64);
  EXPECT_THROW(blocks.cover(*b, 4 * 64), Error);
  EXPECT_EQ(blocks.table(*b).size(), 3u) << "a refused cover takes nothing";
  blocks.cover(*a, 5 * 64);  // its promise is kept
  EXPECT_EQ(blocks.free_pages(), 0);
  expect_consistent(blocks, {*a, *b});
  // Slots run out too.
  BlockManager one(1, 8);
  ASSERT_TRUE(one.acquire(1));
  EXPECT_FALSE(one.acquire(0));
}

TEST(BlockManager, ForkSharesFullPagesAndCopiesThePageStillFilling) {
  BlockManager blocks(3, 12);
  const int32_t first = *blocks.acquire(4);
  blocks.cover(first, 150);  // 3 pages: 2 full, 1 filling
  blocks.advance(first, 150);
  const int32_t fork = *blocks.acquire(4);
  const auto copies = blocks.fork(first, fork);
  EXPECT_EQ(blocks.position(fork), 150);
  ASSERT_EQ(blocks.table(fork).size(), 3u);
  EXPECT_EQ(blocks.table(fork)[0], blocks.table(first)[0]);
  EXPECT_EQ(blocks.table(fork)[1], blocks.table(first)[1]);
  EXPECT_NE(blocks.table(fork)[2], blocks.table(first)[2]) << "the page still being written is not shared";
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0], std::make_pair(blocks.table(first)[2], blocks.table(fork)[2]));
  EXPECT_EQ(blocks.references(blocks.table(first)[0]), 2);
  EXPECT_EQ(blocks.references(blocks.table(first)[2]), 1);
  // The fork's reservation shrank by the pages it shares: 4 - 2 shared - 1 taken = 1 left, and first's 1.
  EXPECT_EQ(blocks.reserved_pages(), 2);
  expect_consistent(blocks, {first, fork});
  // Both may write their own last page, neither a shared one.
  EXPECT_NO_THROW(blocks.check_writable(first, 150, 192));
  EXPECT_NO_THROW(blocks.check_writable(fork, 150, 192));
  EXPECT_THROW(blocks.check_writable(fork, 100, 151), Error);
  // A fork at a page boundary shares everything and copies nothing.
  blocks.cover(first, 192);
  blocks.advance(first, 42);
  const int32_t third = *blocks.acquire(4);
  EXPECT_TRUE(blocks.fork(first, third).empty());
  EXPECT_EQ(blocks.table(third), blocks.table(first));
  expect_consistent(blocks, {first, fork, third});
}

TEST(BlockManager, ReleaseOnCancelFreesOnlyWhatNobodyElseHolds) {
  BlockManager blocks(3, 10);
  const int32_t first = *blocks.acquire(3);
  blocks.cover(first, 130);
  blocks.advance(first, 130);
  const int32_t fork = *blocks.acquire(3);
  blocks.fork(first, fork);
  const std::vector<int32_t> shared = {blocks.table(first)[0], blocks.table(first)[1]};
  blocks.release(first);  // the first choice is cancelled
  for (int32_t page : shared) EXPECT_EQ(blocks.references(page), 1) << "the fork still reads page " << page;
  EXPECT_EQ(blocks.table(fork)[0], shared[0]);
  expect_consistent(blocks, {fork});
  // The prompt cache holds a prefix: releasing the sequence keeps those pages out of the free list.
  blocks.retain(shared);
  blocks.release(fork);
  expect_consistent(blocks, {}, shared);
  EXPECT_EQ(blocks.free_pages(), 8);
  // A hit shares them into a new sequence, which starts at their end.
  const auto resumed = blocks.acquire(4, shared);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(blocks.position(*resumed), 128);
  EXPECT_EQ(blocks.reserved_pages(), 2) << "4 pages in all, 2 of them shared";
  blocks.drop(shared);  // the cache evicts meanwhile: the sequence keeps them
  expect_consistent(blocks, {*resumed});
  blocks.release(*resumed);
  EXPECT_EQ(blocks.free_pages(), 10);
  EXPECT_EQ(blocks.reserved_pages(), 0);
  // Dropping what nobody holds is a bug, not a no-op.
  EXPECT_THROW(blocks.drop(shared), Error);
  EXPECT_THROW(blocks.retain(shared), Error);
}

TEST(BlockManager, AHitNeedsOnlyTheUnsharedPagesFree) {
  BlockManager blocks(2, 4);
  const int32_t a = *blocks.acquire(3);
  blocks.cover(a, 3 * 64);
  blocks.advance(a, 3 * 64);
  const std::vector<int32_t> prefix = {blocks.table(a)[0], blocks.table(a)[1], blocks.table(a)[2]};
  blocks.retain(prefix);
  blocks.release(a);
  EXPECT_EQ(blocks.free_pages(), 1);
  EXPECT_FALSE(blocks.can_acquire(4)) << "4 fresh pages do not fit";
  EXPECT_TRUE(blocks.can_acquire(4, 3)) << "3 of them shared, 1 fresh does";
  const auto b = blocks.acquire(4, prefix);
  ASSERT_TRUE(b);
  blocks.cover(*b, 4 * 64);
  EXPECT_EQ(blocks.free_pages(), 0);
  expect_consistent(blocks, {*b}, prefix);
}

}  // namespace
}  // namespace duet::engine
