#include "engine/decision_workers.h"

#include <algorithm>
#include <utility>

namespace duet::engine {

DecisionWorkers::DecisionWorkers(size_t threads) {
  threads = std::max<size_t>(threads, 1);
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

DecisionWorkers::~DecisionWorkers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void DecisionWorkers::post(uint64_t key, std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    Strand& strand = strands_[key];
    // A strand with nothing queued and nothing running becomes ready; otherwise its runner requeues it.
    if (strand.tasks.empty() && !strand.running) ready_.push_back(key);
    strand.tasks.push_back(std::move(task));
  }
  wake_.notify_one();
}

void DecisionWorkers::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Every posted task runs before the workers leave: a strand is ready or running while it has tasks.
    wake_.wait(lock, [this] { return !ready_.empty() || (stopping_ && strands_.empty()); });
    if (ready_.empty()) return;
    const uint64_t key = ready_.front();
    ready_.pop_front();
    Strand& strand = strands_.at(key);
    std::function<void()> task = std::move(strand.tasks.front());
    strand.tasks.pop_front();
    strand.running = true;
    lock.unlock();
    task();
    task = nullptr;  // what it captured goes now, not when the next task replaces it
    lock.lock();
    strand.running = false;  // still valid: only this worker erases its key, and rehashing moves no element
    if (!strand.tasks.empty()) {
      ready_.push_back(key);
      wake_.notify_one();
    } else {
      strands_.erase(key);
      if (stopping_ && strands_.empty()) wake_.notify_all();  // the others may be waiting for the last one
    }
  }
}

}  // namespace duet::engine
