// The process-wide budget for buffered request bodies: leases take what fits and nothing past it, give everything
// back when released, moved or destroyed, and many threads together never overshoot.
#include "server/body_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace duet::server {
namespace {

TEST(BodyBudget, LeasesTakeWhatFitsAndGiveItBack) {
  BodyBudget budget(100);
  BodyBudget::Lease a(budget), b(budget);
  EXPECT_TRUE(a.hold(60));
  EXPECT_TRUE(a.hold(40));  // holding less than it holds takes nothing back and nothing more
  EXPECT_EQ(a.bytes(), 60u);
  EXPECT_FALSE(b.hold(41));
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_EQ(budget.in_use(), 60u);  // a refused hold takes nothing
  EXPECT_TRUE(b.hold(40));
  EXPECT_FALSE(b.hold(41));
  EXPECT_EQ(b.bytes(), 40u);  // a refused growth keeps what it held
  {
    BodyBudget::Lease moved = std::move(a);
    EXPECT_EQ(budget.in_use(), 100u);
  }
  EXPECT_EQ(budget.in_use(), 40u);
  a.release();  // moved from: holds nothing
  EXPECT_EQ(budget.in_use(), 40u);
  b = BodyBudget::Lease(budget);  // assigning over a lease gives its bytes back
  EXPECT_EQ(budget.in_use(), 0u);
  BodyBudget::Lease unbound;  // a lease of no budget holds anything (a GET's)
  EXPECT_TRUE(unbound.hold(1000));
}

TEST(BodyBudget, ManyThreadsNeverHoldMoreThanTheLimit) {
  BodyBudget budget(1000);
  std::atomic<size_t> most = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        BodyBudget::Lease lease(budget);
        if (lease.hold(1 + i % 300)) {
          size_t now = budget.in_use();
          size_t seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_LE(most.load(), 1000u);
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(BodyBudget, TheDefaultIsAnEighthOfMemoryAndAtLeastOneBody) {
  const size_t fallback = default_buffered_body_bytes(8u << 20);
  EXPECT_GE(fallback, size_t{8} << 20);
  EXPECT_LE(fallback, size_t{4} << 30);
  EXPECT_EQ(default_buffered_body_bytes(size_t{64} << 30), size_t{64} << 30);
}

}  // namespace
}  // namespace duet::server
