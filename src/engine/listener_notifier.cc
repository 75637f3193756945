#include "engine/listener_notifier.h"

#include <utility>

#include "engine/request.h"

namespace duet::engine {

namespace {
thread_local DeferredListeners* t_current = nullptr;
}  // namespace

ListenerNotifier::ListenerNotifier() : thread_([this] { run(); }) {}

ListenerNotifier::~ListenerNotifier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ListenerNotifier::announce(std::vector<std::shared_ptr<RequestHandle>> handles) {
  if (handles.empty()) return;
  {
    std::lock_guard lock(mutex_);
    if (pending_.empty()) {
      pending_ = std::move(handles);
    } else {
      pending_.insert(pending_.end(), std::make_move_iterator(handles.begin()), std::make_move_iterator(handles.end()));
    }
  }
  wake_.notify_one();
}

void ListenerNotifier::run() {
  std::vector<std::shared_ptr<RequestHandle>> batch;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, and nothing left to announce
    batch.swap(pending_);
    lock.unlock();
    for (const std::shared_ptr<RequestHandle>& handle : batch) handle->notify_listener();
    batch.clear();  // the last reference to a handle may go here, off the engine thread
    lock.lock();
  }
}

DeferredListeners::DeferredListeners(ListenerNotifier& notifier) : notifier_(notifier), outer_(t_current) {
  t_current = this;
}

DeferredListeners::~DeferredListeners() {
  t_current = outer_;
  notifier_.announce(std::move(handles_));
}

DeferredListeners* DeferredListeners::current() { return t_current; }

void DeferredListeners::add(std::shared_ptr<RequestHandle> handle) {
  // A sequence's token and its end come in one step: one call announces both.
  if (!handles_.empty() && handles_.back() == handle) return;
  handles_.push_back(std::move(handle));
}

}  // namespace duet::engine
