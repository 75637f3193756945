#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace duet {
namespace {

// Every index of [0, n) reaches the body exactly once, whatever the pool's size, loop after loop.
TEST(ThreadPool, CoversEveryIndexOnce) {
  for (size_t threads : {1u, 2u, 4u, 7u}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 50; ++round)
      for (size_t n : {1u, 2u, 3u, 4u, 5u, 27u, 1000u}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](size_t begin, size_t end) {
          ASSERT_LT(begin, end);
          for (size_t i = begin; i < end; ++i) hits[i]++;
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n=" << n << " i=" << i;
      }
  }
}

// The blocks' bounds depend on n and the pool's size alone: the same in every loop, whichever thread took them.
TEST(ThreadPool, BlocksAreTheSameEveryLoop) {
  ThreadPool pool(3);
  const auto bounds = [&] {
    std::vector<std::atomic<size_t>> end_of(100);
    pool.parallel_for(100, [&](size_t begin, size_t end) { end_of[begin] = end; });
    std::vector<size_t> out;
    for (auto& e : end_of) out.push_back(e.load());
    return out;
  };
  const std::vector<size_t> first = bounds();
  for (int round = 0; round < 20; ++round) EXPECT_EQ(bounds(), first);
}

// Two threads calling at once take turns; each loop still covers its indices once.
TEST(ThreadPool, CallersOnTwoThreadsTakeTurns) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> a(500), b(500);
  const auto run = [&](std::vector<std::atomic<int>>& hits) {
    for (int round = 0; round < 200; ++round)
      pool.parallel_for(hits.size(), [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) hits[i]++;
      });
  };
  std::thread other([&] { run(b); });
  run(a);
  other.join();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].load(), 200) << i;
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i].load(), 200) << i;
}

// A block that never gets a worker's time still gets done: while the pool's one worker is held inside a block, the
// caller takes every other block, so the loop waits for that one block only (with a fixed share per thread the
// worker's whole half would wait for it).
TEST(ThreadPool, TheCallerTakesTheBlocksOfABusyWorker) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<size_t> by_caller{0}, by_worker{0};
  pool.parallel_for(8, [&](size_t begin, size_t end) {
    if (std::this_thread::get_id() == caller) {
      by_caller += end - begin;
    } else {
      by_worker += end - begin;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a worker descheduled in its first block
    }
  });
  EXPECT_EQ(by_caller + by_worker, 8u);
  EXPECT_LE(by_worker.load(), 1u) << "the worker took more than the one block it was held in";
}

// A body that throws on the caller's thread: parallel_for rethrows it once the workers are out, and the pool works on.
TEST(ThreadPool, AThrowOnTheCallerReachesItAndThePoolWorksOn) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  // (The worker's blocks are slow, so that the caller surely takes one: a worker's body must not throw.)
  EXPECT_THROW(pool.parallel_for(64,
                                 [&](size_t, size_t) {
                                   if (std::this_thread::get_id() == caller) throw std::runtime_error("body");
                                   std::this_thread::sleep_for(std::chrono::milliseconds(50));
                                 }),
               std::runtime_error);
  std::vector<std::atomic<int>> hits(64);
  pool.parallel_for(64, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) hits[i]++;
  });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
}

}  // namespace
}  // namespace duet
