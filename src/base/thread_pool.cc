#include "base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>

namespace duet {

namespace {
std::pair<size_t, size_t> block_of(size_t index, size_t parts, size_t n) {
  size_t base = n / parts, extra = n % parts;
  size_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}
}  // namespace

// Blocks a thread: enough that a late worker's share is taken by the others in small pieces, few enough that a body's
// own setup (its scratch vectors) stays small beside its work.
constexpr size_t kBlocksPerThread = 4;

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::take_blocks(Loop& loop) {
  for (;;) {
    const size_t block = loop.next.fetch_add(1, std::memory_order_relaxed);
    if (block >= loop.blocks) return;
    auto [begin, end] = block_of(block, loop.blocks, loop.n);
    (*loop.body)(begin, end);
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    body(0, n);
    return;
  }
  std::lock_guard turn(callers_);
  Loop loop{.body = &body, .n = n, .blocks = std::min(n, size() * kBlocksPerThread)};
  {
    std::lock_guard lock(mutex_);
    loop_ = &loop;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr error;
  try {
    take_blocks(loop);
  } catch (...) {
    loop.next.store(loop.blocks, std::memory_order_relaxed);  // no one takes another block
    error = std::current_exception();
  }
  // No worker joins after this; the ones inside finish the blocks they took (the loop lives on this stack).
  std::unique_lock lock(mutex_);
  loop_ = nullptr;
  done_.wait(lock, [this] { return inside_ == 0; });
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop() {
  size_t seen = 0;
  for (;;) {
    Loop* loop;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      loop = loop_;
      if (loop == nullptr) continue;  // woken after its loop had ended: the others took every block
      ++inside_;
    }
    take_blocks(*loop);
    {
      std::lock_guard lock(mutex_);
      if (--inside_ == 0) done_.notify_all();
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
