// Listener calls off the engine thread (engine/listener_notifier.h): inside a DeferredListeners scope a push queues
// its event at once and leaves the listener call to the notifier's thread, after the scope; outside one, or for a
// handle no shared_ptr owns, the push calls the listener itself, as before.
#include "engine/listener_notifier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/request.h"

namespace duet::engine::listener_notifier_test {
namespace {

struct Calls {
  std::mutex mutex;
  std::vector<std::thread::id> threads;
  size_t count() {
    std::lock_guard lock(mutex);
    return threads.size();
  }
};

std::function<void()> recorder(Calls& calls) {
  return [&calls] {
    std::lock_guard lock(calls.mutex);
    calls.threads.push_back(std::this_thread::get_id());
  };
}

Event token(int32_t id) {
  TokenEvent event;
  event.id = id;
  return event;
}

int32_t token_id(const std::optional<Event>& event) {
  const auto* t = event ? std::get_if<TokenEvent>(&*event) : nullptr;
  return t != nullptr ? t->id : -1;
}

TEST(ListenerNotifier, AStepsEventsAreAnnouncedAfterItsScopeFromTheNotifiersThread) {
  Calls calls;
  auto handle = std::make_shared<RequestHandle>();
  handle->set_listener(recorder(calls));
  {
    ListenerNotifier notifier;
    {
      const DeferredListeners deferred(notifier);
      handle->push(token(7));
      handle->push(token(8));
      EXPECT_EQ(calls.count(), 0u) << "a push inside the scope calls no listener";
      EXPECT_EQ(token_id(handle->try_next()), 7) << "but its event is queued at once";
    }
  }  // the notifier announces what it holds before it joins
  ASSERT_EQ(calls.count(), 1u) << "one call announces a handle's events of one scope";
  EXPECT_NE(calls.threads[0], std::this_thread::get_id());
  EXPECT_EQ(token_id(handle->try_next()), 8);
  EXPECT_FALSE(handle->try_next().has_value());
}

TEST(ListenerNotifier, EveryHandleOfAScopeIsAnnounced) {
  ListenerNotifier notifier;
  std::vector<Calls> calls(5);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (Calls& c : calls) {
    handles.push_back(std::make_shared<RequestHandle>());
    handles.back()->set_listener(recorder(c));
  }
  {
    const DeferredListeners deferred(notifier);
    for (int round = 0; round < 2; ++round)
      for (auto& handle : handles) handle->push(token(round));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (Calls& c : calls) {
    while (c.count() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GE(c.count(), 1u);
  }
}

TEST(ListenerNotifier, OutsideAScopeOrWithoutASharedOwnerThePushCallsTheListener) {
  Calls calls;
  auto handle = std::make_shared<RequestHandle>();
  handle->set_listener(recorder(calls));
  handle->push(token(1));
  ASSERT_EQ(calls.count(), 1u);
  EXPECT_EQ(calls.threads[0], std::this_thread::get_id());

  Calls stack_calls;
  RequestHandle on_the_stack;  // no shared_ptr owns it: nothing to hand to another thread
  on_the_stack.set_listener(recorder(stack_calls));
  ListenerNotifier notifier;
  const DeferredListeners deferred(notifier);
  on_the_stack.push(token(2));
  EXPECT_EQ(stack_calls.count(), 1u);
}

TEST(ListenerNotifier, AListenerClearedBeforeTheAnnouncementIsNotCalled) {
  Calls calls;
  auto handle = std::make_shared<RequestHandle>();
  handle->set_listener(recorder(calls));
  {
    ListenerNotifier notifier;
    {
      const DeferredListeners deferred(notifier);
      handle->push(token(3));
      handle->set_listener(nullptr);  // the connection went away during the step
    }
  }
  EXPECT_EQ(calls.count(), 0u);
  EXPECT_EQ(token_id(handle->try_next()), 3);
}

TEST(ListenerNotifier, TheNotifierMayHoldTheLastReference) {
  std::atomic<int> called{0};
  ListenerNotifier notifier;
  {
    const DeferredListeners deferred(notifier);
    {
      auto handle = std::make_shared<RequestHandle>();
      handle->set_listener([&called] { ++called; });
      handle->push(token(4));
    }  // the handle's owner is gone
  }    // the scope ends: the notifier's copy keeps the handle alive for the call
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (called == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(called.load(), 1);
}

}  // namespace
}  // namespace duet::engine::listener_notifier_test
