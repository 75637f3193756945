// The engine over a fake model (logits a deterministic function of each sequence's tokens): scheduling,
// admission, the queue, cancellation, refusals, stop rules, and exactness under concurrency.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "backend/cpu/sampler.h"
#include "base/error.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine_harness.h"
#include "fake_model.h"
#include "fake_tokenizer.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::FakeModel;
using testing::FakeTokenizer;
using testing::greedy_request;
using testing::Outcome;
using testing::RecordedPiece;
using testing::small_options;

constexpr int32_t kVocab = 97;
constexpr int32_t kChunk = testing::kSmallChunk;

// Drafting needs a backend that can take verify rows back (StateStorage::rewind): one that cannot (the fake model's
// storage here) is refused at start, by name, instead of failing at the first rejection.
TEST(Engine, DraftingOnAStorageThatCannotRewindIsRefused) {
  FakeModel model(kVocab);
  EngineOptions options = small_options(2);
  options.draft.kind = DraftKind::ngram;
  try {
    Engine engine(model, nullptr, options);
    ADD_FAILURE() << "--draft ngram was taken by a storage that cannot rewind";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot yet"), std::string::npos) << e.what();
  }
}

TEST(Engine, GreedyFollowsTheModelsArgmax) {
  FakeModel model(kVocab);
  Engine engine(model, nullptr, small_options(2));
  const Request request = greedy_request({5, 6, 7}, 12);
  const Outcome outcome = drain(*engine.submit(request));
  ASSERT_EQ(outcome.finished_events, 1);
  EXPECT_EQ(outcome.finished.reason, FinishReason::length);
  EXPECT_EQ(outcome.finished.prompt_tokens, 3);
  EXPECT_EQ(outcome.finished.completion_tokens, 12);

  std::vector<int32_t> sequence = request.prompt, expected;
  for (int i = 0; i < 12; ++i) {
    const std::vector<float> logits = model.logits_after(sequence);
    const auto id = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    expected.push_back(id);
    sequence.push_back(id);
  }
  EXPECT_EQ(outcome.tokens, expected);
}

// Every request's tokens, run N at a time, equal the same request alone and all of them one after another.
void check_exactness(bool seeded, int32_t vocab = kVocab) {
  FakeModel model(vocab);
  testing::expect_row_invariance(
      [&](int32_t parallel) { return std::make_unique<Engine>(model, nullptr, small_options(parallel)); },
      testing::mixed_requests(16, vocab, kChunk, 24, seeded));
}

TEST(Engine, ConcurrentGreedyEqualsAloneAndSerial) { check_exactness(false); }
TEST(Engine, ConcurrentSeededEqualsAloneAndSerial) { check_exactness(true); }
// A larger vocabulary (the CPU backend draws a step's rows on several threads from 4096 on; the fake model draws
// them one by one with the same sampler: the demo model's tests and `duet bench` cover the threads).
TEST(Engine, ConcurrentSeededEqualsAloneWithALargeVocabulary) { check_exactness(true, 8192); }

TEST(Engine, StepsCutPromptsAtChunkMultiplesAndKeepTheBudget) {
  FakeModel model(kVocab);
  EngineOptions options = small_options(8);
  {
    Engine engine(model, nullptr, options);
    testing::run_concurrently(engine, testing::mixed_requests(12, kVocab, kChunk, 10, false));
  }
  const auto steps = model.steps();
  ASSERT_FALSE(steps.empty());
  for (const auto& step : steps) {
    std::set<int32_t> states;
    int32_t tokens = 0, prefill_pieces = 0, prefill_tokens = 0;
    for (const auto& piece : step) {
      EXPECT_TRUE(states.insert(piece.slot).second) << "two pieces of one sequence in a step";
      tokens += piece.length;
      if (piece.length > 1 || piece.wants == model::RowOutput::none) {
        EXPECT_EQ(piece.start_position % kChunk, 0) << "prefill cut off a chunk boundary";
        // Only a prompt's last piece (the one that samples) may end off a chunk boundary.
        if (piece.wants == model::RowOutput::none) {
          EXPECT_EQ(piece.length % kChunk, 0);
        }
        ++prefill_pieces;
        prefill_tokens += piece.length;
      }
    }
    // The budget may only be exceeded by the one prefill chunk that guarantees progress.
    if (prefill_pieces > 1) {
      EXPECT_LE(tokens, options.step_token_budget);
    }
    EXPECT_LE(tokens - prefill_tokens, options.parallel);
  }
}

TEST(Engine, ALongPromptAloneFillsTheBudgetInWholeChunks) {
  FakeModel model(kVocab);
  {
    Engine engine(model, nullptr, small_options(1));  // budget 160: two chunks of 64
    drain(*engine.submit(greedy_request(std::vector<int32_t>(300, 3), 2)));
  }
  std::vector<std::pair<int32_t, int32_t>> pieces;
  for (const auto& step : model.steps()) {
    for (const auto& piece : step) pieces.emplace_back(piece.start_position, piece.length);
  }
  const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 128}, {128, 128}, {256, 44}, {300, 1}};
  EXPECT_EQ(pieces, expected);
}

// A short prompt is not queued behind a long one's steps: it is prefilled whole within the long prompt's first two
// steps (the budget goes to the least left first), while the long prompt, the oldest, keeps its one chunk a step.
// Oldest first, the long prompt took the whole budget (two chunks) every step and the short one waited for its last.
TEST(Engine, AShortPromptIsPrefilledBesideALongOne) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(20));
  {
    Engine engine(model, nullptr, small_options(2));  // budget 160: two chunks of 64 and some rows
    auto long_prompt = engine.submit(greedy_request(std::vector<int32_t>(448, 3), 2));
    auto short_prompt = engine.submit(greedy_request(std::vector<int32_t>(50, 5), 2));
    drain(*long_prompt);
    drain(*short_prompt);
  }
  const auto steps = model.steps();
  // The long prompt's slot: its first piece is whole chunks from position 0.
  std::optional<int32_t> long_slot;
  for (const auto& step : steps)
    for (const auto& piece : step)
      if (!long_slot && piece.start_position == 0 && piece.length % kChunk == 0) long_slot = piece.slot;
  ASSERT_TRUE(long_slot);
  int32_t long_steps = 0, long_done = 0;
  std::optional<int32_t> short_in_step;  // which of the long prompt's prefill steps prefilled the short one
  for (const auto& step : steps) {
    const bool long_prefilling = long_done < 448;
    bool long_progressed = !long_prefilling;
    for (const auto& piece : step) {
      if (piece.slot == *long_slot && long_prefilling) {
        EXPECT_EQ(piece.start_position, long_done);
        long_done += piece.length;
        long_progressed = true;
      } else if (piece.slot != *long_slot && piece.start_position == 0) {
        EXPECT_EQ(piece.length, 50) << "the short prompt was cut";
        short_in_step = long_prefilling ? long_steps + 1 : 1000;
      }
    }
    if (long_prefilling) ++long_steps;
    EXPECT_TRUE(long_progressed) << "the oldest prompt skipped a step";
  }
  EXPECT_EQ(long_done, 448);
  ASSERT_TRUE(short_in_step);
  EXPECT_LE(*short_in_step, 2) << "the short prompt waited for the long one's prefill";
}

// A step in which a short prompt finishes is not filled with a long prompt's partial chunks nor with a much longer
// finisher (EngineOptions::finishing_step_factor): its prefill tokens stay within 4 x its own + the oldest's one
// chunk. The control, the factor at 0, fills that step to the budget as before, so the bound can fail.
// The prefill tokens of the step that prefilled a whole prompt of `length` (decode rows, of length 1, not counted).
int32_t prefill_tokens_of_the_step_finishing(const std::vector<std::vector<RecordedPiece>>& steps, int32_t length) {
  for (const auto& step : steps) {
    bool finishes = false;
    int32_t tokens = 0;
    for (const auto& piece : step) {
      if (piece.length > 1) tokens += piece.length;
      if (piece.start_position == 0 && piece.length == length) finishes = true;
    }
    if (finishes) return tokens;
  }
  return -1;
}

TEST(Engine, AFinishingShortPromptGetsAShortStep) {
  for (const int32_t factor : {4, 0}) {
    FakeModel model(kVocab);
    model.set_step_delay(std::chrono::milliseconds(20));
    EngineOptions options = small_options(3);
    options.context = 2048;
    options.step_token_budget = 640;
    options.finishing_step_factor = factor;
    {
      Engine engine(model, nullptr, options);
      auto long_prompt = engine.submit(greedy_request(std::vector<int32_t>(1500, 3), 2));
      auto medium_prompt = engine.submit(greedy_request(std::vector<int32_t>(300, 4), 2));
      auto short_prompt = engine.submit(greedy_request(std::vector<int32_t>(50, 5), 2));
      for (auto* handle : {&long_prompt, &medium_prompt, &short_prompt}) {
        const Outcome outcome = drain(**handle);
        EXPECT_EQ(outcome.tokens.size(), 2u);
      }
    }
    const int32_t tokens = prefill_tokens_of_the_step_finishing(model.steps(), 50);
    ASSERT_GT(tokens, 0) << "the short prompt was cut";
    if (factor == 4) {
      EXPECT_LE(tokens, 4 * 50 + kChunk) << "a finishing short prompt's step carried its neighbours' chunks";
    } else {
      EXPECT_GT(tokens, 4 * 50 + kChunk) << "control: without the factor the step is filled to the budget";
    }
  }
}

TEST(Engine, ThirtyTwoConcurrentRequestsAllFinish) {
  FakeModel model(kVocab);
  Engine engine(model, nullptr, small_options(8));
  const auto requests = testing::mixed_requests(32, kVocab, kChunk, 16, true, 9);
  const auto outcomes = testing::run_concurrently(engine, requests);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].finished_events, 1) << i;
    EXPECT_EQ(outcomes[i].finished.reason, FinishReason::length) << i;
    EXPECT_EQ(static_cast<int32_t>(outcomes[i].tokens.size()), requests[i].sampling.max_tokens) << i;
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.requests_total, 32);
  EXPECT_EQ(stats.requests_finished, 32);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.slots_free, 8);
  EXPECT_GT(stats.steps_total, 0);
}

// Submitters on many threads, random cancels, dropped handles, a small queue: every accepted request ends in
// exactly one FinishedEvent and the counters add up.
TEST(Engine, ManyThreadsSubmitCancelAndDrop) {
  FakeModel model(kVocab);
  EngineOptions options = small_options(4);
  options.queue_limit = 6;
  Engine engine(model, nullptr, options);
  std::atomic<int> accepted = 0, refused = 0, bad_endings = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < 25; ++i) {
        Request request =
            greedy_request(std::vector<int32_t>(1 + rng() % 150, 1 + t), 1 + static_cast<int32_t>(rng() % 20));
        std::shared_ptr<RequestHandle> handle;
        try {
          handle = engine.submit(request);
        } catch (const QueueFull&) {
          ++refused;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        ++accepted;
        const int what = static_cast<int>(rng() % 4);
        if (what == 0) {
          handle.reset();  // walk away
          continue;
        }
        if (what == 1) handle->cancel();
        const Outcome outcome = drain(*handle);
        if (outcome.finished_events != 1 || outcome.timed_out) ++bad_endings;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(bad_endings, 0);
  // Dropped handles end at the engine's next step; wait for the counters to settle.
  EngineStats stats;
  for (int i = 0; i < 200; ++i) {
    stats = engine.stats();
    if (stats.requests_finished + stats.requests_cancelled + stats.requests_failed == stats.requests_total) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats.requests_total, accepted);
  EXPECT_EQ(stats.requests_refused, refused);
  EXPECT_EQ(stats.requests_finished + stats.requests_cancelled, stats.requests_total);
  EXPECT_EQ(stats.requests_failed, 0);
  EXPECT_EQ(stats.slots_free, options.parallel);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
}

TEST(Engine, CancelledRequestFreesItsSlotForTheNext) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(2));
  Engine engine(model, nullptr, small_options(1));
  auto long_one = engine.submit(greedy_request({1, 2, 3}, 400));
  auto next = engine.submit(greedy_request({4, 5}, 3));
  // Wait until the long one is producing tokens, so it really holds the only slot.
  std::optional<Event> first = long_one->next(std::chrono::seconds(10));
  ASSERT_TRUE(first && std::holds_alternative<TokenEvent>(*first));
  EXPECT_EQ(engine.stats().waiting, 1);
  long_one->cancel();
  long_one->cancel();  // twice is fine
  const Outcome cancelled = drain(*long_one);
  EXPECT_EQ(cancelled.finished.reason, FinishReason::cancelled);
  EXPECT_EQ(cancelled.finished_events, 1);
  EXPECT_LT(cancelled.finished.completion_tokens, 400);
  const Outcome admitted = drain(*next);
  EXPECT_EQ(admitted.finished.reason, FinishReason::length);
  EXPECT_EQ(admitted.tokens.size(), 3u);
  EXPECT_EQ(engine.stats().requests_cancelled, 1);
}

TEST(Engine, CancelWhileWaitingNeverRuns) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(2));
  Engine engine(model, nullptr, small_options(1));
  auto running = engine.submit(greedy_request({1}, 50));
  auto waiting = engine.submit(greedy_request({2}, 5));
  waiting->cancel();
  const Outcome outcome = drain(*waiting);
  EXPECT_EQ(outcome.finished.reason, FinishReason::cancelled);
  EXPECT_TRUE(outcome.tokens.empty());
  EXPECT_EQ(drain(*running).finished.reason, FinishReason::length);
}

TEST(Engine, DroppedHandleIsCancelled) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(2));
  Engine engine(model, nullptr, small_options(1));
  engine.submit(greedy_request({1}, 400)).reset();  // nobody will ever read it
  const Outcome next = drain(*engine.submit(greedy_request({2}, 2)));
  EXPECT_EQ(next.finished.reason, FinishReason::length);
  EXPECT_EQ(engine.stats().requests_cancelled, 1);
}

TEST(Engine, FullQueueRefusesWithQueueFull) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(2));
  EngineOptions options = small_options(1);
  options.queue_limit = 2;
  Engine engine(model, nullptr, options);
  std::vector<std::shared_ptr<RequestHandle>> accepted;
  for (int i = 0; i < 3; ++i) accepted.push_back(engine.submit(greedy_request({1, 2}, 200)));  // 1 runs, 2 wait
  EXPECT_THROW(engine.submit(greedy_request({3}, 1)), QueueFull);
  EXPECT_EQ(engine.stats().requests_refused, 1);
  for (auto& handle : accepted) handle->cancel();
  for (auto& handle : accepted) EXPECT_EQ(drain(*handle).finished_events, 1);
  // Room again once they are gone.
  EXPECT_EQ(drain(*engine.submit(greedy_request({3}, 1))).finished.reason, FinishReason::length);
}

std::string refusal_code(Engine& engine, const Request& request) {
  try {
    engine.submit(request);
  } catch (const RequestInvalid& e) {
    return e.code();
  }
  return "accepted";
}

TEST(Engine, InvalidRequestsAreRefusedWithACode) {
  FakeModel model(kVocab);
  Engine engine(model, nullptr, small_options(1));
  EXPECT_EQ(refusal_code(engine, greedy_request({}, 4)), "invalid_prompt");
  EXPECT_EQ(refusal_code(engine, greedy_request({1, kVocab}, 4)), "invalid_prompt");
  EXPECT_EQ(refusal_code(engine, greedy_request({-1}, 4)), "invalid_prompt");
  EXPECT_EQ(refusal_code(engine, greedy_request(std::vector<int32_t>(500, 1), 13)), "context_length_exceeded");
  EXPECT_EQ(refusal_code(engine, greedy_request(std::vector<int32_t>(500, 1), 12)), "accepted");  // exactly fits
  Request bad = greedy_request({1}, 4);
  bad.sampling.top_p = 0;
  EXPECT_EQ(refusal_code(engine, bad), "invalid_sampling");
  bad = greedy_request({1}, 0);
  EXPECT_EQ(refusal_code(engine, bad), "invalid_sampling");
  bad = greedy_request({1}, 4);
  bad.sampling.stop = {"x"};  // no tokenizer to match text against
  EXPECT_EQ(refusal_code(engine, bad), "invalid_sampling");
}

TEST(Engine, MemoryPlanThatDoesNotFitIsRefused) {
  FakeModel model(kVocab);
  EngineOptions options = small_options(4);
  options.memory_limit_bytes = 1000;
  try {
    Engine engine(model, nullptr, options);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory plan does not fit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.states_created(), 0) << "nothing is allocated before the plan is checked";
}

TEST(Engine, BadOptionsAreRefused) {
  FakeModel model(kVocab);
  EngineOptions options = small_options(1);
  options.prefill_chunk = 100;
  EXPECT_THROW(Engine(model, nullptr, options), Error);
  options = small_options(0);
  EXPECT_THROW(Engine(model, nullptr, options), Error);
}

TEST(Engine, DestructorCancelsRunningAndWaiting) {
  FakeModel model(kVocab);
  model.set_step_delay(std::chrono::milliseconds(2));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  {
    Engine engine(model, nullptr, small_options(2));
    for (int i = 0; i < 5; ++i) handles.push_back(engine.submit(greedy_request({1, 2, 3}, 400)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& handle : handles) {
    const Outcome outcome = drain(*handle, std::chrono::seconds(1));
    EXPECT_EQ(outcome.finished_events, 1);
    EXPECT_EQ(outcome.finished.reason, FinishReason::cancelled);
  }
}

TEST(Engine, StopTokenIdsAndEos) {
  FakeModel model(kVocab, /*eos_ids=*/{});
  Engine probe(model, nullptr, small_options(1));
  const Outcome free_run = drain(*probe.submit(greedy_request({10, 11}, 8)));
  ASSERT_EQ(free_run.tokens.size(), 8u);

  // Stop on the 4th token: it ends the request, counts as completion, but is not sent as a token.
  Request stop = greedy_request({10, 11}, 8);
  stop.sampling.stop_token_ids = {free_run.tokens[3]};
  const Outcome stopped = drain(*probe.submit(stop));
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[3]);
  const auto sent = static_cast<size_t>(first - free_run.tokens.begin());
  EXPECT_EQ(stopped.finished.reason, FinishReason::stop);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(free_run.tokens.begin(), first));
  EXPECT_EQ(stopped.finished.completion_tokens, static_cast<int32_t>(sent + 1));
  EXPECT_EQ(stopped.finished.matched_stop_token, free_run.tokens[3]);

  // The model's eos stops it unless ignore_eos.
  FakeModel eos_model(kVocab, {free_run.tokens[3]});
  Engine engine(eos_model, nullptr, small_options(1));
  Request with_eos = greedy_request({10, 11}, 8);
  with_eos.sampling.ignore_eos = false;
  EXPECT_EQ(drain(*engine.submit(with_eos)).tokens, stopped.tokens);
  with_eos.sampling.ignore_eos = true;
  EXPECT_EQ(drain(*engine.submit(with_eos)).tokens, free_run.tokens);
}

TEST(Engine, StopStringsCutTheTextAndEndTheRequest) {
  FakeModel model(kVocab);
  FakeTokenizer tokenizer(kVocab);
  Engine engine(model, &tokenizer, small_options(2));
  const Outcome free_run = drain(*engine.submit(greedy_request({10, 11}, 30)));
  std::string full;
  for (int32_t id : free_run.tokens) full += FakeTokenizer::piece(id);
  EXPECT_EQ(free_run.text, full);

  // A stop string made of the last bit of token 4's text and the first bit of token 5's: it spans tokens.
  const std::string fourth = FakeTokenizer::piece(free_run.tokens[4]);
  const std::string fifth = FakeTokenizer::piece(free_run.tokens[5]);
  const std::string stop_string = fourth.substr(fourth.size() - 1) + fifth.substr(0, 1);
  Request request = greedy_request({10, 11}, 30);
  request.sampling.stop = {stop_string, "never-appears"};
  const Outcome stopped = drain(*engine.submit(request));
  EXPECT_EQ(stopped.finished.reason, FinishReason::stop);
  EXPECT_EQ(stopped.finished.matched_stop_string, stop_string);
  const size_t at = full.find(stop_string);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(stopped.text, full.substr(0, at));
  EXPECT_LE(stopped.tokens.size(), 6u);
}

SampledToken token(int32_t id) {
  SampledToken out;
  out.id = id;
  return out;
}

TEST(Sequence, SplitCharacterIsReleasedWhole) {
  FakeTokenizer tokenizer(kVocab);
  Request request = greedy_request({1}, 10);
  auto handle = std::make_shared<RequestHandle>();
  Sequence sequence(0, request, handle, &tokenizer);
  EXPECT_FALSE(sequence.accept(token(90), false));  // the first byte of "\xC3\xA9" alone is not text yet
  EXPECT_FALSE(sequence.accept(token(91), false));
  EXPECT_FALSE(sequence.accept(token(90), false));  // dangling at the end: flushed as a replacement character
  sequence.finish(FinishReason::length);
  const Outcome outcome = drain(*handle);
  EXPECT_EQ(outcome.tokens, (std::vector<int32_t>{90, 91, 90}));
  EXPECT_EQ(outcome.text, "\xC3\xA9\xEF\xBF\xBD");
  EXPECT_EQ(outcome.finished.text_tail, "\xEF\xBF\xBD");
}

TEST(Engine, LogprobsComeWithTokensWhenAsked) {
  FakeModel model(kVocab);
  Engine engine(model, nullptr, small_options(1));
  Request request = greedy_request({1, 2}, 3);
  request.sampling.top_logprobs = 2;
  std::shared_ptr<RequestHandle> handle = engine.submit(request);
  std::optional<Event> event = handle->next(std::chrono::seconds(10));
  ASSERT_TRUE(event && std::holds_alternative<TokenEvent>(*event));
  const TokenEvent& token = std::get<TokenEvent>(*event);
  const std::vector<float> logits = model.logits_after(std::vector<int32_t>{1, 2});
  ASSERT_TRUE(token.logprob.has_value());
  EXPECT_FLOAT_EQ(*token.logprob, backend::cpu::raw_logprob(logits, token.id));
  ASSERT_EQ(token.top_logprobs.size(), 2u);
  EXPECT_EQ(token.top_logprobs[0].id, token.id);  // greedy picks the most likely
  drain(*handle);
}

TEST(Engine, ModelFailureEndsTheStepsRequestsWithAnErrorAndTheEngineGoesOn) {
  FakeModel model(kVocab);
  model.set_poison_token(66);
  Engine engine(model, nullptr, small_options(2));
  const Outcome failed = drain(*engine.submit(greedy_request({1, 66, 2}, 4)));
  EXPECT_EQ(failed.finished.reason, FinishReason::error);
  EXPECT_NE(failed.finished.error.find("poisoned"), std::string::npos) << failed.finished.error;
  model.set_poison_token(-1);
  EXPECT_EQ(drain(*engine.submit(greedy_request({1, 2}, 4))).finished.reason, FinishReason::length);
  EXPECT_EQ(engine.stats().requests_failed, 1);
  EXPECT_EQ(engine.stats().slots_free, 2);
}

TEST(Engine, IdleEngineSleeps) {
  FakeModel model(kVocab);
  Engine engine(model, nullptr, small_options(1));
  drain(*engine.submit(greedy_request({1}, 2)));
  const int64_t steps = engine.stats().steps_total;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(engine.stats().steps_total, steps) << "steps ran with nothing to do";
  const std::clock_t cpu_before = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(static_cast<double>(std::clock() - cpu_before) / CLOCKS_PER_SEC, 0.05) << "busy-spinning";
}

}  // namespace
}  // namespace duet::engine
