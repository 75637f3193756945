#pragma once
// Helpers shared by the engine tests: drain a handle into an Outcome, make greedy and mixed-length requests, and
// run a set of requests concurrently, each alone on a fresh engine, and all serially on one engine.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace duet::engine::testing {

struct Outcome {
  std::vector<int32_t> tokens;  // ids of the TokenEvents, in order
  std::string text;             // TokenEvent texts + the FinishedEvent's tail
  std::vector<std::optional<float>> logprobs;
  FinishedEvent finished;
  int finished_events = 0;
  bool timed_out = false;
};

// Reads events until the FinishedEvent (or gives up after `limit`), then checks nothing follows it.
inline Outcome drain(RequestHandle& handle, std::chrono::milliseconds limit = std::chrono::seconds(120)) {
  Outcome out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (out.finished_events == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      out.timed_out = true;
      return out;
    }
    std::optional<Event> event = handle.next(std::chrono::milliseconds(100));
    if (!event) continue;
    if (auto* token = std::get_if<TokenEvent>(&*event)) {
      out.tokens.push_back(token->id);
      out.text += token->text;
      out.logprobs.push_back(token->logprob);
    } else {
      out.finished = std::get<FinishedEvent>(*event);
      out.text += out.finished.text_tail;
      ++out.finished_events;
    }
  }
  if (handle.next(std::chrono::milliseconds(20))) ++out.finished_events;  // anything after the end is a bug
  return out;
}

constexpr int32_t kSmallChunk = 64;

// Small engines over the fake model: 512 positions, chunks of 64, room in the queue.
inline EngineOptions small_options(int32_t parallel) {
  EngineOptions options;
  options.parallel = parallel;
  options.context = 512;
  options.prefill_chunk = kSmallChunk;
  options.queue_limit = 64;
  options.step_token_budget = 160;  // two chunks and some decode rows: prompts share steps
  return options;
}

// Temperature 0 for exactly `max_tokens` tokens (eos ignored).
inline Request greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  return request;
}

// Prompts of mixed lengths (single tokens, around chunk boundaries, several chunks), greedy and seeded.
inline std::vector<Request> mixed_requests(int count, int32_t vocab, int32_t chunk, int32_t max_tokens, bool seeded,
                                           uint32_t salt = 0) {
  std::mt19937 rng(1234 + salt);
  const std::vector<int32_t> lengths = {1, 3, chunk - 1, chunk, chunk + 1, 2 * chunk + 7, 17, 5 * chunk / 2};
  std::vector<Request> requests;
  for (int i = 0; i < count; ++i) {
    Request request;
    const int32_t length = lengths[static_cast<size_t>(i) % lengths.size()] + i / static_cast<int>(lengths.size());
    std::uniform_int_distribution<int32_t> id(0, vocab - 1);
    for (int32_t t = 0; t < length; ++t) request.prompt.push_back(id(rng));
    request.sampling.max_tokens = max_tokens - (i % 5);
    request.sampling.ignore_eos = true;  // runs compare full lengths
    if (seeded) {
      request.sampling.temperature = 0.9f;
      request.sampling.top_p = 0.95f;
      request.sampling.top_k = i % 2 == 0 ? 0 : 40;
      request.sampling.seed = 1000 + static_cast<uint64_t>(i);
    } else {
      request.sampling.temperature = 0;
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

inline std::vector<Outcome> run_concurrently(Engine& engine, const std::vector<Request>& requests) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& request : requests) handles.push_back(engine.submit(request));
  std::vector<Outcome> outcomes;
  for (auto& handle : handles) outcomes.push_back(drain(*handle));
  return outcomes;
}

inline std::vector<Outcome> run_serially(Engine& engine, const std::vector<Request>& requests) {
  std::vector<Outcome> outcomes;
  for (const Request& request : requests) outcomes.push_back(drain(*engine.submit(request)));
  return outcomes;
}

inline std::vector<Outcome> run_each_alone(const std::function<std::unique_ptr<Engine>()>& make_engine,
                                           const std::vector<Request>& requests) {
  std::vector<Outcome> outcomes;
  for (const Request& request : requests) {
    std::unique_ptr<Engine> engine = make_engine();
    outcomes.push_back(drain(*engine->submit(request)));
  }
  return outcomes;
}

inline void expect_same_tokens(const std::vector<Outcome>& got, const std::vector<Outcome>& expected,
                               const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].timed_out) << what << ": request " << i << " timed out";
    EXPECT_EQ(got[i].finished_events, 1) << what << ": request " << i;
    EXPECT_EQ(got[i].finished.reason, expected[i].finished.reason) << what << ": request " << i;
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << what << ": request " << i << " differs";
  }
}

// Row invariance: every request's tokens, run 1, 4 and 16 at a time and all one after another (on 4 slots), equal
// the same request alone on a fresh engine of 1 slot. `make_engine(parallel)` builds an engine with that many
// slots. The requests ignore eos (mixed_requests), so each alone run must end at its max_tokens.
inline void expect_row_invariance(const std::function<std::unique_ptr<Engine>(int32_t parallel)>& make_engine,
                                  const std::vector<Request>& requests) {
  const auto alone = run_each_alone([&] { return make_engine(1); }, requests);
  for (const Outcome& outcome : alone) ASSERT_EQ(outcome.finished.reason, FinishReason::length);
  const std::unique_ptr<Engine> serial = make_engine(4);
  expect_same_tokens(run_serially(*serial, requests), alone, "serial");
  for (int32_t parallel : {1, 4, 16}) {
    const std::unique_ptr<Engine> engine = make_engine(parallel);
    expect_same_tokens(run_concurrently(*engine, requests), alone, "parallel " + std::to_string(parallel));
  }
}

}  // namespace duet::engine::testing
