#include "base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace duet {

namespace {
std::pair<size_t, size_t> block_of(size_t index, size_t parts, size_t n) {
  size_t base = n / parts, extra = n % parts;
  size_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}
}  // namespace

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    body(0, n);
    return;
  }
  std::lock_guard turn(callers_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  auto [begin, end] = block_of(0, size(), n);
  if (begin < end) body(begin, end);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* body;
    size_t n;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      body = body_;
      n = n_;
    }
    auto [begin, end] = block_of(index, size(), n);
    if (begin < end) (*body)(begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

ThreadPool& global_thread_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("DUET_THREADS");
    return env != nullptr ? static_cast<size_t>(std::strtoul(env, nullptr, 10)) : size_t{0};
  }());
  return pool;
}

}  // namespace duet
