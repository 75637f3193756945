// The decision workers (engine/decision_workers.h) alone and inside the engine over the fake model: a decision's
// tasks run in order and one at a time, different decisions' head work runs side by side (shown by heads that wait
// for each other, with a timeout so that a serialized engine fails instead of hanging), every answer comes back, a
// cancelled decision frees its slot while its head still runs, and an engine shut down with decisions in flight ends
// each of them once and skips the head work nobody waits for.
#include "engine/decision_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "engine/decision_sink.h"
#include "engine/engine.h"
#include "engine_harness.h"
#include "fake_model.h"

namespace duet::engine {
namespace {

using namespace std::chrono_literals;
using testing::drain;
using testing::FakeModel;
using testing::Outcome;

// Threads that each wait until `expected` of them have arrived, or until a timeout: whether all met.
class Rendezvous {
 public:
  explicit Rendezvous(int expected) : expected_(expected) {}
  bool arrive_and_wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    ++arrived_;
    all_.notify_all();
    return all_.wait_for(lock, timeout, [this] { return arrived_ >= expected_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_;
  int expected_;
  int arrived_ = 0;
};

TEST(DecisionWorkers, TasksOfOneKeyRunInOrderOneAtATime) {
  constexpr int kKeys = 6, kTasks = 200;
  std::vector<std::vector<int>> order(kKeys);
  std::vector<std::atomic<int>> inside(kKeys);
  std::atomic<int> overlaps{0};
  {
    DecisionWorkers workers(4);
    EXPECT_EQ(workers.size(), 4u);
    for (int t = 0; t < kTasks; ++t)
      for (int k = 0; k < kKeys; ++k)
        workers.post(static_cast<uint64_t>(k), [&, k, t] {
          if (inside[k].fetch_add(1) != 0) ++overlaps;
          order[k].push_back(t);  // unguarded: a key's tasks never run at once (the sanitizers would see it)
          if (t % 50 == 0) std::this_thread::sleep_for(1ms);
          inside[k].fetch_sub(1);
        });
  }  // the destructor runs everything posted
  EXPECT_EQ(overlaps, 0);
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(order[k].size(), static_cast<size_t>(kTasks)) << "key " << k;
    for (int t = 0; t < kTasks; ++t) EXPECT_EQ(order[k][t], t) << "key " << k;
  }
}

// Two keys' tasks meet when there are two workers; with one they cannot (the second starts after the first gave up).
TEST(DecisionWorkers, DifferentKeysRunSideBySide) {
  for (const size_t threads : {size_t{1}, size_t{2}}) {
    Rendezvous both(2);
    std::atomic<int> met{0};
    const auto timeout = threads == 1 ? 200ms : 20s;
    {
      DecisionWorkers workers(threads);
      for (uint64_t key : {7u, 8u}) workers.post(key, [&] { met += both.arrive_and_wait(timeout); });
    }
    EXPECT_EQ(met, threads == 1 ? 1 : 2) << threads << " workers";
  }
}

TEST(DecisionWorkers, TasksPostedWhileRunningRunBeforeTheDestructorReturns) {
  std::atomic<int> ran{0};
  {
    DecisionWorkers workers(3);
    for (uint64_t key = 0; key < 5; ++key)
      workers.post(key, [&, key] {
        std::this_thread::sleep_for(2ms);
        ++ran;
        // A task that posts more under its own key (as the engine posts a decision's next chunk while the last runs).
        workers.post(key, [&] { ++ran; });
      });
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(ran, 10);
}

// A decision's sink over the fake model's rows: a digest of every row (its answer, so that an answer that depends on
// anything but its own rows shows), and a head that can be held, or made to wait for the other heads.
class TestHead final : public DecisionSink {
 public:
  void add_rows(int64_t first, int64_t count, std::span<const float> rows) override {
    EXPECT_EQ(first, seen);
    for (float v : rows) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      digest = (digest ^ bits) * 1099511628211ull;
    }
    seen += count;
  }
  std::vector<float> finish() override {
    ++finish_calls;
    entered.set_value();
    float met = 0;
    if (rendezvous != nullptr) met = rendezvous->arrive_and_wait(rendezvous_timeout) ? 1.0f : 0.0f;
    if (release.valid()) release.wait();
    return {static_cast<float>(digest & 0xffffff), static_cast<float>(digest >> 40), static_cast<float>(seen), met};
  }

  uint64_t digest = 1469598103934665603ull;
  int64_t seen = 0;
  std::atomic<int> finish_calls{0};
  std::promise<void> entered;
  Rendezvous* rendezvous = nullptr;
  std::chrono::milliseconds rendezvous_timeout{0};
  std::shared_future<void> release;  // when valid, finish() waits for it
};

Request decide(std::shared_ptr<TestHead> head, int32_t length, int32_t salt) {
  Request request;
  request.kind = RequestKind::decide;
  for (int32_t i = 0; i < length; ++i) request.prompt.push_back((i * 7 + salt * 13 + 1) % 97);
  request.decision = std::move(head);
  return request;
}

EngineOptions options_with(int32_t parallel, int32_t workers) {
  EngineOptions options = testing::small_options(parallel);
  options.decision_workers = workers;
  return options;
}

TEST(EngineDecisions, WorkerCountComesFromTheFlagOrTheCores) {
  EngineOptions options;
  options.parallel = 64;
  options.decision_workers = 3;
  EXPECT_EQ(decision_worker_count(options), 3);
  options.decision_workers = 0;
  const int32_t count = decision_worker_count(options);
  EXPECT_GE(count, 2);
  EXPECT_LE(count, 8);
  options.parallel = 1;
  EXPECT_EQ(decision_worker_count(options), 1);  // no more than decisions can run at once
  FakeModel model;
  options.decision_workers = -1;
  EXPECT_THROW(Engine(model, nullptr, options), Error);
}

// Many decisions at once, more than the workers, with chat beside them: every one answered, each answer the one it
// gets alone, whatever the number of workers.
TEST(EngineDecisions, EveryAnswerComesBackAndEqualsItsAnswerAlone) {
  FakeModel model;
  const std::vector<int32_t> lengths = {1, 63, 64, 65, 200, 130, 7, 300, 64, 129};
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Engine engine(model, nullptr, options_with(1, 1));
    const Outcome outcome =
        drain(*engine.submit(decide(std::make_shared<TestHead>(), lengths[i], static_cast<int32_t>(i))));
    ASSERT_EQ(outcome.finished.reason, FinishReason::stop) << outcome.finished.error;
    alone.push_back(outcome.finished.decision_logits);
  }
  for (const int32_t workers : {1, 2, 4}) {
    Engine engine(model, nullptr, options_with(6, workers));
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (size_t i = 0; i < lengths.size(); ++i) {
      handles.push_back(engine.submit(decide(std::make_shared<TestHead>(), lengths[i], static_cast<int32_t>(i))));
      if (i % 3 == 0) handles.push_back(engine.submit(testing::greedy_request({1, 2, 3}, 20)));
    }
    size_t decision = 0;
    for (const auto& handle : handles) {
      const Outcome outcome = drain(*handle, 60s);
      ASSERT_FALSE(outcome.timed_out) << workers << " workers";
      EXPECT_EQ(outcome.finished_events, 1);
      const bool decided = outcome.tokens.empty();  // a chat request ends at its max_tokens
      EXPECT_EQ(outcome.finished.reason, decided ? FinishReason::stop : FinishReason::length) << outcome.finished.error;
      if (decided) {
        EXPECT_EQ(outcome.finished.decision_logits, alone[decision]) << workers << " workers, decision " << decision;
        ++decision;
      }
    }
    EXPECT_EQ(decision, lengths.size());
    EXPECT_EQ(engine.stats().requests_finished, static_cast<int64_t>(handles.size()));
  }
}

// The heads of two decisions run at the same time: each head waits (up to a timeout) until the other has entered.
// Two workers: they meet. One worker: the second head starts only after the first gave up waiting, so they never
// meet; that is the engine as it was (one worker), and shows that the test can tell.
TEST(EngineDecisions, TwoDecisionsHeadsRunSideBySide) {
  FakeModel model;
  for (const int32_t workers : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    Engine engine(model, nullptr, options_with(2, workers));
    Rendezvous both(2);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 2; ++i) {
      auto head = std::make_shared<TestHead>();
      head->rendezvous = &both;
      head->rendezvous_timeout = workers == 1 ? 300ms : 20s;
      handles.push_back(engine.submit(decide(head, 150 + 70 * i, i)));
    }
    int met = 0;
    for (const auto& handle : handles) {
      const Outcome outcome = drain(*handle, 60s);
      ASSERT_FALSE(outcome.timed_out);
      ASSERT_EQ(outcome.finished.reason, FinishReason::stop) << outcome.finished.error;
      met += outcome.finished.decision_logits.at(3) == 1.0f;
    }
    EXPECT_EQ(met, workers == 2 ? 2 : 1);
  }
}

// A decision cancelled while its head runs frees its slot at once (the engine does not wait for the head), its answer
// is dropped, and the next decision in that slot is answered, beside the held head when there is a second worker.
TEST(EngineDecisions, ACancelledDecisionFreesItsSlotWhileItsHeadRuns) {
  FakeModel model;
  for (const int32_t workers : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    Engine engine(model, nullptr, options_with(1, workers));
    std::promise<void> go;
    auto held = std::make_shared<TestHead>();
    held->release = go.get_future().share();
    std::future<void> entered = held->entered.get_future();
    const auto handle = engine.submit(decide(held, 100, 1));
    ASSERT_EQ(entered.wait_for(20s), std::future_status::ready) << "the head never ran";
    handle->cancel();
    const Outcome cancelled = drain(*handle, 5s);
    ASSERT_FALSE(cancelled.timed_out) << "the cancelled decision waited for its head";
    EXPECT_EQ(cancelled.finished.reason, FinishReason::cancelled);
    EXPECT_TRUE(cancelled.finished.decision_logits.empty());
    for (int i = 0; i < 500 && engine.stats().slots_free != 1; ++i) std::this_thread::sleep_for(2ms);
    EXPECT_EQ(engine.stats().slots_free, 1);

    auto next_head = std::make_shared<TestHead>();
    const auto next = engine.submit(decide(next_head, 90, 2));
    if (workers == 2) {
      const Outcome outcome = drain(*next, 20s);
      ASSERT_FALSE(outcome.timed_out) << "the next decision waited for the cancelled one's head";
      EXPECT_EQ(outcome.finished.reason, FinishReason::stop);
      go.set_value();
    } else {
      std::this_thread::sleep_for(50ms);
      go.set_value();  // its tasks run once the one worker is free
      const Outcome outcome = drain(*next, 20s);
      EXPECT_EQ(outcome.finished.reason, FinishReason::stop);
    }
    EXPECT_EQ(next_head->seen, 90);
    EXPECT_EQ(engine.stats().requests_cancelled, 1);
    EXPECT_EQ(engine.stats().requests_finished, 1);
  }
}

// The engine destroyed while heads run and more wait behind them: every decision ends once, as cancelled, before the
// held heads are let go; the destructor then waits only for the heads already running, never starts the others.
// A decision gives back its slot and KV pages once its last chunk's rows are taken, not when its head ends: with one
// slot, a chat request submitted while the decision's head is held runs to its end meanwhile (on the engine before,
// it waited for the head), and the decision's answer is the one it gets alone.
TEST(EngineDecisions, ADecisionGivesBackItsSlotWhenItsRowsAreTaken) {
  FakeModel model;
  std::vector<float> alone;
  {
    Engine engine(model, nullptr, options_with(1, 2));
    const Outcome outcome = drain(*engine.submit(decide(std::make_shared<TestHead>(), 150, 5)));
    ASSERT_EQ(outcome.finished.reason, FinishReason::stop) << outcome.finished.error;
    alone = outcome.finished.decision_logits;
  }
  Engine engine(model, nullptr, options_with(1, 2));
  auto head = std::make_shared<TestHead>();
  std::promise<void> release;
  head->release = release.get_future().share();
  std::future<void> entered = head->entered.get_future();
  auto decision = engine.submit(decide(head, 150, 5));
  ASSERT_EQ(entered.wait_for(30s), std::future_status::ready);
  const Outcome chat = drain(*engine.submit(testing::greedy_request({1, 2, 3}, 8)), 10s);
  EXPECT_FALSE(chat.timed_out) << "the chat request waited for the decision's head";
  EXPECT_EQ(chat.finished.reason, FinishReason::length);
  EXPECT_EQ(chat.tokens.size(), 8u);
  EXPECT_EQ(head->finish_calls, 1);  // still the one head, held
  // A second decision waits: the plan holds one decision's rows per slot, and the held one still has its rows.
  auto second_head = std::make_shared<TestHead>();
  auto second = engine.submit(decide(second_head, 70, 6));
  std::this_thread::sleep_for(200ms);
  for (const auto& step : model.steps())  // its 70-token prompt is one piece when it runs
    for (const testing::RecordedPiece& piece : step)
      EXPECT_NE(piece.length, 70) << "a second decision prefilled while the first's head held its rows";
  release.set_value();
  const Outcome outcome = drain(*decision, 30s);
  ASSERT_EQ(outcome.finished.reason, FinishReason::stop) << outcome.finished.error;
  EXPECT_EQ(outcome.finished.decision_logits, alone);
  const Outcome second_outcome = drain(*second, 30s);
  EXPECT_EQ(second_outcome.finished.reason, FinishReason::stop) << second_outcome.finished.error;
  EXPECT_EQ(second_head->seen, 70);
  EXPECT_EQ(engine.stats().slots_free, 1);
}

TEST(EngineDecisions, ShutdownWithDecisionsInFlight) {
  FakeModel model;
  std::promise<void> go;
  const std::shared_future<void> release = go.get_future().share();
  std::vector<std::shared_ptr<TestHead>> heads;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  auto engine = std::make_unique<Engine>(model, nullptr, options_with(4, 2));
  for (int i = 0; i < 4; ++i) {
    heads.push_back(std::make_shared<TestHead>());
    heads.back()->release = release;
    handles.push_back(engine->submit(decide(heads.back(), 70 + 40 * i, i)));
  }
  // Both workers hold a head; the other two decisions' heads wait for a worker.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  auto running = [&] {
    int n = 0;
    for (const auto& head : heads) n += head->finish_calls.load();
    return n;
  };
  while (running() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(running(), 2);
  for (int i = 0; i < 100 && engine->stats().prompt_tokens_total < 70 + 110 + 150 + 190; ++i)
    std::this_thread::sleep_for(2ms);

  std::thread destroyer([&] { engine.reset(); });
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome outcome = drain(*handles[i], 10s);
    ASSERT_FALSE(outcome.timed_out) << "decision " << i << " did not end before its head was let go";
    EXPECT_EQ(outcome.finished_events, 1);
    EXPECT_EQ(outcome.finished.reason, FinishReason::cancelled) << i;
  }
  go.set_value();
  destroyer.join();
  EXPECT_EQ(running(), 2) << "a head nobody waited for was started at shutdown";
}

}  // namespace
}  // namespace duet::engine
