#pragma once
// Listener calls off the engine thread's critical path. A RequestHandle's listener (an HTTP server posts a drain to
// the connection's event loop) cost the engine thread about 2.4 us a call on the 2-core dev machine, a call per
// sequence per step: 150 us of the 265 us the engine spent accepting 64 tokens (docs/benchmarks.md, twenty-third
// round). While a DeferredListeners is alive on a thread, that thread's RequestHandle::push() queues the event as
// always but leaves the listener call to it; when it ends, it hands the handles to a ListenerNotifier, whose own
// thread calls their listeners. The events, their order and their queue are unchanged: only which thread announces
// them, and a few microseconds later.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace duet::engine {

class RequestHandle;

class ListenerNotifier {
 public:
  ListenerNotifier();
  ~ListenerNotifier();  // announces what it still holds, then joins
  ListenerNotifier(const ListenerNotifier&) = delete;
  ListenerNotifier& operator=(const ListenerNotifier&) = delete;

  // Each handle's listener is called once, on the notifier's thread, in order.
  void announce(std::vector<std::shared_ptr<RequestHandle>> handles);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<RequestHandle>> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

// RAII on one thread (the engine's, around the part of a step that accepts tokens).
class DeferredListeners {
 public:
  explicit DeferredListeners(ListenerNotifier& notifier);
  ~DeferredListeners();
  DeferredListeners(const DeferredListeners&) = delete;
  DeferredListeners& operator=(const DeferredListeners&) = delete;

  // The scope alive on this thread, or nullptr (RequestHandle::push calls the listener itself).
  static DeferredListeners* current();
  void add(std::shared_ptr<RequestHandle> handle);

 private:
  ListenerNotifier& notifier_;
  DeferredListeners* outer_;
  std::vector<std::shared_ptr<RequestHandle>> handles_;
};

}  // namespace duet::engine
