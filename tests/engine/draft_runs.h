#pragma once
// What the speculative-decoding exactness tests share on either backend (tests/engine/draft_exactness_test.cc on the
// CPU, tests/cuda/drafts_cuda_test.cc on the GPU): the requests (every way a request can end, every sampling kind),
// the engine options, and the comparison of whole outcomes (tokens, text, logprobs, how each ended).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_harness.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine::testing {

inline EngineOptions draft_options(int32_t parallel, DraftKind kind = DraftKind::none, int32_t tokens = 3) {
  EngineOptions o;
  o.parallel = parallel;
  o.context = 512;
  o.prefill_chunk = 64;
  o.step_token_budget = 192;
  o.draft.kind = kind;
  o.draft.tokens = tokens;
  return o;
}

// Prompts of several lengths (some cross 64 and 128 while decoding, so verify pieces meet chunk ends), some
// repetitive (prompt lookup finds them), each under a different sampling.
inline std::vector<Request> draft_requests(const tokenizer::Tokenizer& tokenizer) {
  const std::vector<std::string> prompts = {
      "The weather is",
      "Once upon a time there was a small village by the sea. Once upon a time there was a small village by the",
      "The cat sat on the mat. The dog sat on the log. The cat sat on the",
      "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36",
      "Hello, how are you today?",
      "A list of fruits: apple, banana, cherry, apple, banana, cherry, apple, banana,",
      "Quiet",
      "In the beginning the program reads its input, then it writes its output, and then it reads its input again",
      "Two words",
      "If you want to install the package, run the command. If you want to remove the package, run the",
      // More than two chunks of 64: its prefill runs MTP rows in chunks that do not sample.
      "The function returns a list of the lines of the file, each with its newline. The function returns a list "
      "of the words of the line, each without its spaces. The function returns a list of the names in the module, "
      "each as a string. The function returns a list of the values of the dictionary, each in the order of its "
      "keys. The function returns a list of the",
  };
  std::vector<Request> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.prompt = tokenizer.encode(prompts[i]);
    r.sampling.max_tokens = 40 + static_cast<int32_t>(i % 3) * 13;
    r.sampling.ignore_eos = i % 4 != 3;  // some end at eos (a stop token inside accepted drafts)
    r.sampling.skip_special_tokens = false;
    r.sampling.seed = 500 + i;
    switch (i % 5) {
      case 0:  // greedy
        r.sampling.temperature = 0;
        break;
      case 1:  // seeded
        r.sampling.temperature = 0.8f;
        r.sampling.top_p = 0.95f;
        break;
      case 2:  // penalized, greedy and with logprobs
        r.sampling.temperature = 0;
        r.sampling.repetition_penalty = 1.3f;
        r.sampling.presence_penalty = 0.4f;
        r.sampling.frequency_penalty = 0.3f;
        r.sampling.top_logprobs = 3;
        break;
      case 3:  // seeded, penalized, top-k
        r.sampling.temperature = 0.7f;
        r.sampling.top_k = 20;
        r.sampling.frequency_penalty = 0.5f;
        break;
      case 4:  // greedy with logprobs and stop strings
        r.sampling.temperature = 0;
        r.sampling.top_logprobs = 0;
        r.sampling.stop = {"the ", "ing"};
        break;
    }
    if (i == 8) r.sampling.max_tokens = 2;  // fewer tokens than a step verifies
    if (i == 6) r.sampling.max_tokens = 1;
    out.push_back(std::move(r));
  }
  return out;
}

inline void expect_same_outcomes(const std::vector<Outcome>& got, const std::vector<Outcome>& expected,
                                 const std::string& what) {
  expect_same_tokens(got, expected, what);
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    EXPECT_EQ(got[i].text, expected[i].text) << what << ": request " << i;
    EXPECT_EQ(got[i].logprobs, expected[i].logprobs) << what << ": request " << i;
    EXPECT_EQ(got[i].finished.matched_stop_string, expected[i].finished.matched_stop_string) << what << ": " << i;
    EXPECT_EQ(got[i].finished.matched_stop_token, expected[i].finished.matched_stop_token) << what << ": " << i;
    EXPECT_EQ(got[i].finished.completion_tokens, expected[i].finished.completion_tokens) << what << ": " << i;
  }
}

// The requests on an engine over `model`; the stats say how many drafts were accepted.
inline std::vector<Outcome> run_drafts(model::Model& model, const tokenizer::Tokenizer* tokenizer,
                                       const std::vector<Request>& requests, const EngineOptions& o,
                                       EngineStats* stats = nullptr) {
  Engine engine(model, tokenizer, o);
  auto outcomes = run_concurrently(engine, requests);
  if (stats) *stats = engine.stats();
  return outcomes;
}

// n = 3 choices of one seeded request, each with its own seed and logprobs: forked from one prefill.
inline std::vector<Request> draft_choices(const tokenizer::Tokenizer& tokenizer) {
  std::vector<Request> choices;
  for (int i = 0; i < 3; ++i) {
    Request r = draft_requests(tokenizer)[1];
    r.sampling.seed = 900 + static_cast<uint64_t>(i);
    r.sampling.top_logprobs = 2;
    choices.push_back(std::move(r));
  }
  return choices;
}

inline std::vector<Outcome> run_draft_choices(model::Model& model, const tokenizer::Tokenizer* tokenizer,
                                              const std::vector<Request>& choices, const EngineOptions& o,
                                              EngineStats* stats = nullptr) {
  Engine engine(model, tokenizer, o);
  std::vector<Outcome> outcomes;
  for (const auto& handle : engine.submit_choices(choices)) outcomes.push_back(drain(*handle));
  if (stats) *stats = engine.stats();
  return outcomes;
}

inline int64_t drafts_accepted(const EngineStats& stats) {
  int64_t n = 0;
  for (int64_t a : stats.drafts_accepted) n += a;
  return n;
}

// How many requests' tokens or logprobs differ from `expected`: what a planted fault must make nonzero.
inline size_t differing(const std::vector<Outcome>& got, const std::vector<Outcome>& expected) {
  size_t n = 0;
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i)
    n += got[i].tokens != expected[i].tokens || got[i].logprobs != expected[i].logprobs;
  return n;
}

}  // namespace duet::engine::testing
