#include "engine/request.h"

#include "engine/listener_notifier.h"

namespace duet::engine {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
  }
  return "unknown";
}

std::optional<Event> RequestHandle::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

std::optional<Event> RequestHandle::try_next() {
  std::lock_guard lock(mutex_);
  if (events_.empty()) return std::nullopt;
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void RequestHandle::set_listener(std::function<void()> listener) {
  {
    std::lock_guard lock(listener_mutex_);
    listener_ = std::move(listener);
  }
  bool pending = false;
  {
    std::lock_guard lock(mutex_);
    pending = !events_.empty();
  }
  if (pending) notify_listener();
}

void RequestHandle::notify_listener() {
  std::lock_guard lock(listener_mutex_);
  if (!listener_) return;
  try {
    listener_();
  } catch (...) {
    // A listener that throws must not take the engine thread down.
  }
}

void RequestHandle::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool RequestHandle::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

void RequestHandle::push(Event event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
  if (DeferredListeners* deferred = DeferredListeners::current()) {
    if (std::shared_ptr<RequestHandle> self = weak_from_this().lock()) {
      deferred->add(std::move(self));
      return;
    }
  }
  notify_listener();
}

}  // namespace duet::engine
