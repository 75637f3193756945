// Admission by KV pages over the fake model: with a KV cache smaller than parallel * context, a request is admitted
// only when a slot is free and the pages for its whole length (prompt + max_tokens) can be reserved. Short requests
// share the cache, a long one waits its turn (FIFO: nothing behind it overtakes it) and then answers as it does
// alone, one that could never fit is refused at submit, and every page comes back.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine_harness.h"
#include "fake_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::FakeModel;
using testing::Outcome;

constexpr int32_t kAdmissionVocab = 97;

EngineOptions paged_options(int64_t kv_cache_tokens) {
  EngineOptions options;
  options.parallel = 8;
  options.context = 1024;
  options.prefill_chunk = 64;
  options.step_token_budget = 160;
  options.kv_cache_tokens = kv_cache_tokens;
  return options;
}

Request greedy(int32_t prompt_length, int32_t max_tokens, int32_t first_id) {
  Request request;
  for (int32_t i = 0; i < prompt_length; ++i) request.prompt.push_back((first_id + 7 * i) % kAdmissionVocab);
  request.sampling.temperature = 0;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  return request;
}

// Stats lag a finished event by one release; give the engine thread a moment.
EngineStats settled_stats(const Engine& engine) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  EngineStats stats = engine.stats();
  while ((stats.running > 0 || stats.kv_pages_reserved > 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    stats = engine.stats();
  }
  return stats;
}

TEST(EngineKvPages, DefaultCacheHoldsAWholeContextPerSlot) {
  FakeModel model(kAdmissionVocab);
  Engine engine(model, nullptr, paged_options(0));
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.kv_pages_total, 8 * 1024 / 64);
  EXPECT_EQ(stats.kv_pages_free, stats.kv_pages_total);
  EXPECT_EQ(stats.kv_pages_reserved, 0);
}

TEST(EngineKvPages, ShortRequestsShareTheCacheAndALongOneWaitsItsTurn) {
  FakeModel model(kAdmissionVocab);
  model.set_step_delay(std::chrono::milliseconds(1));
  const EngineOptions options = paged_options(8 * 64);  // 8 pages, where parallel * context would be 128
  Engine engine(model, nullptr, options);
  std::vector<Request> requests;
  for (int i = 0; i < 7; ++i) requests.push_back(greedy(10, 40, i));  // 50 tokens: one page each
  requests.push_back(greedy(300, 150, 50));  // 450 tokens: all 8 pages, so it waits for the short ones
  requests.push_back(greedy(5, 20, 60));     // fits beside them, but is behind the long one: it waits too
  const std::vector<Outcome> outcomes = testing::run_concurrently(engine, requests);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].finished.reason, FinishReason::length) << i;
    EXPECT_EQ(static_cast<int32_t>(outcomes[i].tokens.size()), requests[i].sampling.max_tokens) << i;
  }

  // The steps: all 7 short requests in one step; the long one's first piece (a prompt chunk longer than any short
  // prompt) only once no short request runs; the last short one only after the long one started.
  const auto steps = model.steps();
  size_t widest = 0, long_start = steps.size(), last_short_start = steps.size();
  for (size_t s = 0; s < steps.size(); ++s) {
    widest = std::max(widest, steps[s].size());
    for (const auto& piece : steps[s]) {
      if (piece.start_position == 0 && piece.length > 10 && long_start == steps.size()) long_start = s;
      if (piece.start_position == 0 && piece.length == 5) last_short_start = s;
    }
  }
  EXPECT_EQ(widest, 7u);
  ASSERT_LT(long_start, steps.size());
  EXPECT_EQ(steps[long_start].size(), 1u) << "the long request ran beside a short one: pages were not reserved";
  EXPECT_GT(last_short_start, long_start) << "a later request overtook the waiting long one";

  // The long request's tokens equal the same request alone (on a cache of its own size).
  Engine alone(model, nullptr, paged_options(0));
  EXPECT_EQ(drain(*alone.submit(requests[7])).tokens, outcomes[7].tokens);

  const EngineStats stats = settled_stats(engine);
  EXPECT_EQ(stats.kv_pages_total, 8);
  EXPECT_EQ(stats.kv_pages_free, stats.kv_pages_total);
  EXPECT_EQ(stats.kv_pages_reserved, 0);
}

TEST(EngineKvPages, ARequestNeedingMoreThanTheWholeCacheIsRefused) {
  FakeModel model(kAdmissionVocab);
  Engine engine(model, nullptr, paged_options(8 * 64 - 10));  // rounds up to 8 pages: 512 tokens
  try {
    engine.submit(greedy(500, 100, 1));  // within the context (1024), past the cache
    FAIL() << "accepted a request that could never get its pages";
  } catch (const RequestInvalid& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("holds 512 tokens (8 pages of 64)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs 10 pages for 600 tokens"), std::string::npos) << e.what();
  }
  const Outcome fits = drain(*engine.submit(greedy(500, 12, 1)));  // exactly the whole cache
  EXPECT_EQ(fits.finished.reason, FinishReason::length);
  EXPECT_EQ(settled_stats(engine).kv_pages_free, 8);
}

TEST(EngineKvPages, MemoryPlanCountsPagesNotSlotContexts) {
  FakeModel model(kAdmissionVocab);  // a page is 256 bytes here, and no fixed state
  EngineOptions options = paged_options(0);
  options.parallel = 64;
  const MemoryPlan whole = plan_memory(model, options);
  EXPECT_EQ(whole.kv_pages, 64 * 1024 / 64);
  EXPECT_EQ(whole.state_pool_bytes, static_cast<size_t>(64 * 16 * 256));
  options.kv_cache_tokens = 64 * 64;
  const MemoryPlan shared = plan_memory(model, options);
  EXPECT_EQ(shared.state_pool_bytes, static_cast<size_t>(64 * 256));

  // A limit between the two: 64 whole contexts do not fit, the same slots sharing 64 pages do.
  options.memory_limit_bytes = (whole.total_bytes + shared.total_bytes) / 2;
  options.kv_cache_tokens = 0;
  EXPECT_THROW(Engine(model, nullptr, options), Error);
  options.kv_cache_tokens = 64 * 64;
  Engine engine(model, nullptr, options);
  EXPECT_EQ(engine.stats().kv_pages_total, 64);
}

}  // namespace
}  // namespace duet::engine
