// Speculative decoding on the GPU (issue 20): the trained demo model (models/demo, with its MTP layer) on the CUDA
// backend, whose verify pieces run as decode rows (the skinny GEMM, the decode attention kernel, the delta rule's
// chunked form) and are taken back by CudaStateStorage::rewind (backend/cuda/gdn_rewind.h). With `--draft mtp` and
// `--draft ngram`, greedy, seeded and penalized requests with stop strings, logprobs, eos and short max_tokens give
// exactly the GPU's own plain tokens, logprobs, text and finish at 1, 4 and 16 streams; drafts are really accepted;
// prompts cross chunk ends while decoding (the drafts stop before them: the GPU cannot rewind a fold, and a piece over
// one is refused). Planted faults must be caught: drafts taken unchecked, rejected rows left in the state, and verify
// rows computed as prefill rows (the pinned GEMM: other bits, so other logprobs). Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "../engine/demo_model.h"
#include "../engine/draft_runs.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine {
namespace {

using testing::Outcome;

class CudaDrafts : public testing::DemoModelTest {
 protected:
  static void SetUpTestSuite() {
    if (::duet::testing::no_gpu_reason().empty()) load("cuda");
  }
  void SetUp() override {
    DUET_REQUIRE_GPU();
    DemoModelTest::SetUp();
    ASSERT_TRUE(model_->has_mtp());
  }

  static std::vector<Request> requests() { return testing::draft_requests(*tokenizer_); }
  static std::vector<Outcome> run(const std::vector<Request>& requests, const EngineOptions& o,
                                  EngineStats* stats = nullptr) {
    return testing::run_drafts(*model_, tokenizer_, requests, o, stats);
  }
  // Plain decoding on the GPU: what every drafted run must give (not the CPU's tokens: other bits).
  static const std::vector<Outcome>& plain() {
    static const std::vector<Outcome> outcomes = run(requests(), testing::draft_options(4));
    return outcomes;
  }
};

// The GPU's plain decoding is itself row-invariant: alone (1 stream) = 4 at once = 16 at once.
TEST_F(CudaDrafts, PlainDecodingIsTheSameAtEveryParallelism) {
  for (int32_t parallel : {1, 16})
    testing::expect_same_outcomes(run(requests(), testing::draft_options(parallel)), plain(),
                                  "plain, parallel " + std::to_string(parallel));
}

TEST_F(CudaDrafts, MtpDraftsGiveThePlainTokens) {
  for (int32_t parallel : {1, 4, 16}) {
    EngineStats stats;
    testing::expect_same_outcomes(run(requests(), testing::draft_options(parallel, DraftKind::mtp, 3), &stats), plain(),
                                  "mtp K=3 parallel " + std::to_string(parallel));
    EXPECT_GT(testing::drafts_accepted(stats), 0) << "no MTP draft accepted at parallel " << parallel;
    EXPECT_GT(stats.verify_pieces_total, 0);
  }
}

TEST_F(CudaDrafts, MtpDraftsOfEveryLengthGiveThePlainTokens) {
  for (int32_t k : {1, 2, 4}) {
    EngineStats stats;
    testing::expect_same_outcomes(run(requests(), testing::draft_options(4, DraftKind::mtp, k), &stats), plain(),
                                  "mtp K=" + std::to_string(k));
    EXPECT_GT(testing::drafts_accepted(stats), 0) << "K=" << k;
    EXPECT_GT(stats.drafts_verified[static_cast<size_t>(k - 1)], 0) << "K=" << k << ": the last position never ran";
  }
}

TEST_F(CudaDrafts, NgramDraftsGiveThePlainTokens) {
  for (int32_t parallel : {1, 4, 16}) {
    EngineStats stats;
    testing::expect_same_outcomes(run(requests(), testing::draft_options(parallel, DraftKind::ngram, 4), &stats),
                                  plain(), "ngram K=4 parallel " + std::to_string(parallel));
    EXPECT_GT(testing::drafts_accepted(stats), 0) << "no prompt-lookup draft accepted at parallel " << parallel;
  }
}

TEST_F(CudaDrafts, MeasuredDraftCountsGiveThePlainTokens) {
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    EngineOptions o = testing::draft_options(4, kind, 4);
    o.draft.measured = true;
    EngineStats stats;
    testing::expect_same_outcomes(run(requests(), o, &stats), plain(), std::string("measured ") + to_string(kind));
  }
}

// n > 1: choices forked from one prefill (CudaStateStorage::copy_slot) decode with drafts like any sequence.
TEST_F(CudaDrafts, ChoicesGiveThePlainTokens) {
  const std::vector<Request> choices = testing::draft_choices(*tokenizer_);
  const auto run_choices = [&](const EngineOptions& o) {
    return testing::run_draft_choices(*model_, tokenizer_, choices, o);
  };
  const auto expected = run_choices(testing::draft_options(4));
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram})
    testing::expect_same_outcomes(run_choices(testing::draft_options(4, kind, 3)), expected,
                                  std::string("n=3 ") + to_string(kind));
}

// With the prompt cache: prompts cut at their cache points, resumed in a second round (snapshots restored).
TEST_F(CudaDrafts, DraftsWithThePromptCacheGiveThePlainTokens) {
  std::vector<Request> set = requests();
  for (size_t i : {1, 7}) {
    Request r = set[i];
    r.prompt.insert(r.prompt.end(), set[i].prompt.begin(), set[i].prompt.end());
    r.prompt.insert(r.prompt.end(), set[i].prompt.begin(), set[i].prompt.end());
    set.push_back(std::move(r));
  }
  const auto expected = run(set, testing::draft_options(4));
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    EngineOptions o = testing::draft_options(4, kind, 3);
    o.prompt_cache_bytes = size_t{64} << 20;
    Engine engine(*model_, tokenizer_, o);
    testing::expect_same_outcomes(testing::run_concurrently(engine, set), expected,
                                  std::string("first round, ") + to_string(kind));
    testing::expect_same_outcomes(testing::run_concurrently(engine, set), expected,
                                  std::string("resumed, ") + to_string(kind));
    EXPECT_GT(engine.stats().prompt_cache_hits, 0);
  }
}

// Planted faults: each must change some request's tokens or logprobs. A verify piece computed as prefill rows runs at
// 1 stream (a CUDA step takes its decode pieces first, so it must be the step's only piece).
TEST_F(CudaDrafts, DraftsTakenUncheckedAreCaught) {
  EngineOptions o = testing::draft_options(4, DraftKind::mtp, 3);
  o.draft.test_accept_unchecked = true;
  EXPECT_GT(testing::differing(run(requests(), o), plain()), 0u);
}

TEST_F(CudaDrafts, RejectedRowsLeftInTheStateAreCaught) {
  EngineOptions o = testing::draft_options(4, DraftKind::mtp, 3);
  o.draft.test_skip_rewind = true;
  EXPECT_GT(testing::differing(run(requests(), o), plain()), 0u);
}

TEST_F(CudaDrafts, VerifyRowsThroughThePrefillGemmAreCaught) {
  EngineOptions o = testing::draft_options(1, DraftKind::mtp, 3);
  o.draft.test_verify_as_prefill = true;
  EXPECT_GT(testing::differing(run(requests(), o), plain()), 0u);
}

}  // namespace
}  // namespace duet::engine
