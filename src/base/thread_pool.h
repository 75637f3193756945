#pragma once
// A fixed pool of workers for data-parallel loops. parallel_for cuts [0, n) into contiguous blocks (a few per thread;
// where they fall depends only on n and the pool size) and the caller and the workers take blocks until none is
// left, so a worker that the operating system has not run yet (a machine with more busy threads than cores) delays
// nothing: the others take its blocks. Which thread runs a block depends on timing, so a body must compute each index
// on its own (every caller does: rows, columns, heads), never something that depends on where a block begins.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace duet {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads = 0);  // 0: one per hardware thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }
  // Calls body(begin, end) on disjoint blocks covering [0, n); returns when all are done. The caller's thread
  // takes part. Callers on several threads take turns (the engine's steps and a decision's head work share the
  // global pool); a body must not call parallel_for on the same pool. A body that throws on the caller's thread
  // ends the loop early (the blocks taken by workers still finish) and parallel_for rethrows it.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body);

 private:
  // One parallel_for's blocks, on the caller's stack while it runs.
  struct Loop {
    const std::function<void(size_t, size_t)>* body;
    size_t n, blocks;
    std::atomic<size_t> next{0};  // the next block to take
  };
  static void take_blocks(Loop& loop);
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex callers_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Loop* loop_ = nullptr;  // the running loop, while workers may still join it
  size_t generation_ = 0;
  size_t inside_ = 0;  // workers that joined the running loop and have not left it
  bool stopping_ = false;
};

// The process-wide pool the CPU backend uses (size from DUET_THREADS or the hardware).
ThreadPool& global_thread_pool();

}  // namespace duet
