// n choices of one prompt (Engine::submit_choices) on the real tiny model: the prompt is prefilled once and the later
// choices start from a copy of the first's state, and every choice's tokens equal those of the same request
// prefilled on its own, greedy and seeded, whatever else runs beside them; choices admitted too late to fork (no slot
// free), and choices whose first choice was cancelled, prefill themselves and still finish with the same tokens.
#include <gtest/gtest.h>

#include <set>

#include "engine/engine.h"
#include "engine_harness.h"
#include "model/model.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

class ForkChoices : public testing::TinyModelTest {
 protected:
  static std::unique_ptr<Engine> engine(int32_t parallel) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 640;
    o.prefill_chunk = 64;
    o.queue_limit = 64;
    o.step_token_budget = 256;
    return std::make_unique<Engine>(*model_, nullptr, o);
  }

  // The server's choices: one request, choice i drawing with seed + i.
  // penalized: repetition, presence and frequency penalties on, which read the counts of the choices' slots.
  static std::vector<Request> choices(size_t prompt_length, int32_t n, bool seeded, int32_t max_tokens = 12,
                                      bool penalized = false, size_t stride = 131) {
    std::vector<Request> requests;
    Request request;
    for (size_t i = 0; i < prompt_length; ++i)
      request.prompt.push_back(static_cast<int32_t>((i * stride + 7) % static_cast<size_t>(vocab())));
    request.sampling.max_tokens = max_tokens;
    if (penalized) {
      request.sampling.repetition_penalty = 1.5f;
      request.sampling.presence_penalty = 0.5f;
      request.sampling.frequency_penalty = 0.5f;
    }
    request.sampling.ignore_eos = true;
    request.sampling.temperature = seeded ? 1.5f : 0.0f;  // the random tiny model is peaked: draws must spread
    request.sampling.top_k = seeded ? 40 : 0;
    request.sampling.seed = 77;
    for (int32_t i = 0; i < n; ++i) {
      requests.push_back(request);
      requests.back().sampling.seed += static_cast<uint64_t>(i);
    }
    return requests;
  }

  static std::vector<Outcome> drain_all(const std::vector<std::shared_ptr<RequestHandle>>& handles) {
    std::vector<Outcome> outcomes;
    for (const auto& handle : handles) outcomes.push_back(drain(*handle));
    return outcomes;
  }

  // Each choice as its own request on a fresh engine: the separate prefills n cost before forking.
  static std::vector<Outcome> alone(const std::vector<Request>& requests) {
    return testing::run_each_alone([] { return engine(1); }, requests);
  }
};

TEST_F(ForkChoices, SharedPrefillEqualsSeparatePrefillsAndPrefillsOnce) {
  for (bool seeded : {false, true})
    for (size_t length : {size_t{3}, size_t{64}, size_t{100}, size_t{200}}) {
      const auto requests = choices(length, 4, seeded);
      const auto expected = alone(requests);
      auto shared = engine(4);
      const auto got = drain_all(shared->submit_choices(requests));
      const std::string what = (seeded ? "seeded, prompt " : "greedy, prompt ") + std::to_string(length);
      testing::expect_same_tokens(got, expected, what);
      EXPECT_EQ(shared->stats().prompt_tokens_total, static_cast<int64_t>(length)) << what << ": one prefill";
      if (seeded) {
        std::set<std::vector<int32_t>> distinct;
        for (const Outcome& outcome : got) distinct.insert(outcome.tokens);
        EXPECT_GT(distinct.size(), 1u) << what << ": choices draw with their own seeds";
      }
      for (const Outcome& outcome : got) EXPECT_EQ(outcome.finished.prompt_tokens, static_cast<int32_t>(length));
    }
}

// With penalties, every draw reads counts in the storage (engine/counts_sync.h): a fork's first draw its first choice's
// slot (the prompt's ids), its later draws its own slot, which earlier penalized requests held (the engine's four slots
// are all used first). A reused slot's counts start over, so the choices still equal separate requests; without the
// clear they would read the earlier requests' ids too.
TEST_F(ForkChoices, PenalizedChoicesInReusedSlotsEqualSeparateRequests) {
  for (bool seeded : {false, true}) {
    const auto requests = choices(100, 4, seeded, 12, true);
    const auto expected = alone(requests);
    auto shared = engine(4);
    std::vector<std::shared_ptr<RequestHandle>> earlier;
    for (size_t k = 0; k < 4; ++k) earlier.push_back(shared->submit(choices(50, 1, !seeded, 16, true, 37 + k)[0]));
    for (const Outcome& outcome : drain_all(earlier)) EXPECT_EQ(outcome.finished.reason, FinishReason::length);
    const std::string what = seeded ? "seeded, penalized" : "greedy, penalized";
    testing::expect_same_tokens(drain_all(shared->submit_choices(requests)), expected, what);
    EXPECT_EQ(shared->stats().prompt_tokens_total, 4 * 50 + 100) << what << ": one prefill for the choices";
  }
}

// The control for the count above: the same choices submitted one by one prefill the prompt n times.
TEST_F(ForkChoices, SeparateSubmitsPrefillEachTime) {
  const auto requests = choices(100, 3, false);
  const auto expected = alone(requests);  // before: two engines must not step one model at once
  auto separate = engine(4);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& request : requests) handles.push_back(separate->submit(request));
  testing::expect_same_tokens(drain_all(handles), expected, "separate submits");
  EXPECT_EQ(separate->stats().prompt_tokens_total, 300);
}

TEST_F(ForkChoices, EqualWhateverElseRuns) {
  const auto requests = choices(130, 3, true);
  const auto expected = alone(requests);
  auto busy = engine(8);
  const auto others = testing::mixed_requests(5, vocab(), 64, 10, true, 3);
  std::vector<std::shared_ptr<RequestHandle>> before, after;
  for (size_t i = 0; i < 3; ++i) before.push_back(busy->submit(others[i]));
  const auto forked = busy->submit_choices(requests);
  for (size_t i = 3; i < others.size(); ++i) after.push_back(busy->submit(others[i]));
  testing::expect_same_tokens(drain_all(forked), expected, "beside other requests");
  for (auto& handle : before) EXPECT_EQ(drain(*handle).finished.reason, FinishReason::length);
  for (auto& handle : after) EXPECT_EQ(drain(*handle).finished.reason, FinishReason::length);
}

// Fewer slots than choices: the later choices wait for slots (never deadlocked, none lost) and, admitted after the
// first choice decodes, prefill the prompt themselves.
TEST_F(ForkChoices, ChoicesAdmittedLatePrefillThemselves) {
  const auto requests = choices(100, 5, true, 6);
  const auto expected = alone(requests);
  auto two_slots = engine(2);
  testing::expect_same_tokens(drain_all(two_slots->submit_choices(requests)), expected, "2 slots, 5 choices");
  // The first two share one prefill; the three admitted later each prefill the prompt again.
  EXPECT_EQ(two_slots->stats().prompt_tokens_total, 4 * 100);
  auto one_slot = engine(1);
  testing::expect_same_tokens(drain_all(one_slot->submit_choices(requests)), expected, "1 slot, 5 choices");
}

TEST_F(ForkChoices, ACancelledFirstChoiceLeavesTheOthersToPrefill) {
  const auto requests = choices(200, 3, false);
  const auto expected = alone(requests);
  auto shared = engine(4);
  auto handles = shared->submit_choices(requests);
  handles[0]->cancel();
  EXPECT_EQ(drain(*handles[0]).finished.reason, FinishReason::cancelled);
  for (size_t i = 1; i < handles.size(); ++i) EXPECT_EQ(drain(*handles[i]).tokens, expected[i].tokens) << i;
}

// A first choice that ends with its first token still lends its state to the others.
TEST_F(ForkChoices, OneTokenChoices) {
  const auto requests = choices(70, 3, true, 1);
  const auto expected = alone(requests);
  auto shared = engine(3);
  testing::expect_same_tokens(drain_all(shared->submit_choices(requests)), expected, "max_tokens 1");
  EXPECT_EQ(shared->stats().prompt_tokens_total, 70);
}

TEST_F(ForkChoices, TheQueueTakesAllChoicesOrNone) {
  EngineOptions o;
  o.parallel = 1;
  o.context = 640;
  o.queue_limit = 2;
  Engine small(*model_, nullptr, o);
  auto running = small.submit(choices(10, 1, false, 200)[0]);
  EXPECT_THROW(small.submit_choices(choices(10, 3, false)), QueueFull) << "1 slot held, 3 choices, a queue of 2";
  EXPECT_EQ(small.stats().requests_total, 1);
  auto two = small.submit_choices(choices(10, 2, false, 2));
  running->cancel();
  for (auto& handle : two) EXPECT_EQ(drain(*handle).finished.reason, FinishReason::length);
  EXPECT_THROW(small.submit_choices({choices(10, 1, false)[0], choices(11, 1, false)[0]}), Error)
      << "choices share one prompt";
}

}  // namespace
}  // namespace duet::engine
