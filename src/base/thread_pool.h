#pragma once
// A fixed pool of workers for data-parallel loops. parallel_for splits [0, n) into contiguous blocks; the
// split depends only on n and the pool size, so results are reproducible run to run.
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
  // global pool); a body must not call parallel_for on the same pool.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body);

 private:
  void worker_loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex callers_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t n_ = 0;
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
};

// The process-wide pool the CPU backend uses (size from DUET_THREADS or the hardware).
ThreadPool& global_thread_pool();

}  // namespace duet
