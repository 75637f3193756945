// Speculative decoding is invisible in the tokens (engine/draft_verify.h), on the trained demo model (models/demo,
// with its MTP layer, and its tokenizer): greedy, seeded and penalized requests, with stop strings, logprobs, eos,
// short max_tokens and n > 1, give with `--draft mtp` and `--draft ngram` (K = 1 to 4) exactly the tokens, logprobs,
// text and finish of plain decoding, at 1, 4 and 16 streams; drafts are really accepted (the comparison is not
// vacuous); and two planted faults (drafts taken without checking them, rejected rows left in the state) are caught.
#include <gtest/gtest.h>

#include "../tests_dir.h"
#include "demo_model.h"
#include "draft_runs.h"
#include "engine/engine.h"
#include "engine_harness.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

class Drafts : public testing::DemoModelTest {
 public:
  void SetUp() override {
    DemoModelTest::SetUp();
    if (model_ != nullptr) {
      ASSERT_TRUE(model_->has_mtp());
    }
  }

  static EngineOptions options(int32_t parallel, DraftKind kind = DraftKind::none, int32_t tokens = 3) {
    return testing::draft_options(parallel, kind, tokens);
  }
  static std::vector<Request> requests() { return testing::draft_requests(*tokenizer_); }
  static void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& expected,
                          const std::string& what) {
    testing::expect_same_outcomes(got, expected, what);
  }
  static std::vector<Outcome> run(const std::vector<Request>& requests, EngineOptions o, EngineStats* stats = nullptr) {
    return testing::run_drafts(*model_, tokenizer_, requests, o, stats);
  }

  static const std::vector<Outcome>& plain() {
    static const std::vector<Outcome> outcomes = run(requests(), options(4));
    return outcomes;
  }

  static int64_t accepted(const EngineStats& stats) { return testing::drafts_accepted(stats); }
};

// The baseline itself exercises what it must: stop strings, eos and max_tokens all end requests.
TEST_F(Drafts, BaselineEndsEveryWay) {
  int by_string = 0, by_token = 0, by_length = 0;
  for (const Outcome& o : plain()) {
    by_string += o.finished.matched_stop_string.has_value();
    by_token += o.finished.matched_stop_token.has_value();
    by_length += o.finished.reason == FinishReason::length;
  }
  EXPECT_GT(by_string, 0);
  EXPECT_GT(by_length, 0);
  (void)by_token;  // eos may or may not come within the budget: checked when it does
}

TEST_F(Drafts, MtpDraftsGiveThePlainTokens) {
  for (int32_t parallel : {1, 4, 16}) {
    EngineStats stats;
    expect_same(run(requests(), options(parallel, DraftKind::mtp, 3), &stats), plain(),
                "mtp K=3 parallel " + std::to_string(parallel));
    EXPECT_GT(accepted(stats), 0) << "no MTP draft accepted at parallel " << parallel << ": the test is vacuous";
    EXPECT_GT(stats.verify_pieces_total, 0);
  }
}

// With the prompt cache on, prompts of more than 64 tokens are cut at their cache points (prefill chunks that run MTP
// rows without sampling) and the second round of the same requests resumes the first's state (and reads its MTP rows,
// engine/mtp_drafter.h): the tokens are still the plain ones.
TEST_F(Drafts, DraftsWithThePromptCacheGiveThePlainTokens) {
  std::vector<Request> set = requests();
  for (size_t i : {1, 7}) {  // two long prompts: the short one three times over
    Request r = set[i];
    r.prompt.insert(r.prompt.end(), set[i].prompt.begin(), set[i].prompt.end());
    r.prompt.insert(r.prompt.end(), set[i].prompt.begin(), set[i].prompt.end());
    set.push_back(std::move(r));
  }
  ASSERT_GT(set.back().prompt.size(), 64u);
  const auto expected = run(set, options(4));
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    EngineOptions o = options(4, kind, 3);
    o.prompt_cache_bytes = size_t{64} << 20;
    Engine engine(*model_, tokenizer_, o);
    expect_same(testing::run_concurrently(engine, set), expected, std::string("first round, ") + to_string(kind));
    expect_same(testing::run_concurrently(engine, set), expected, std::string("resumed, ") + to_string(kind));
    const EngineStats stats = engine.stats();
    EXPECT_GT(stats.prompt_cache_hits, 0) << "no prompt resumed: the test does not test the cache";
    EXPECT_GT(accepted(stats), 0);
  }
}

TEST_F(Drafts, MtpDraftsOfEveryLengthGiveThePlainTokens) {
  for (int32_t k : {1, 2, 4}) {
    EngineStats stats;
    expect_same(run(requests(), options(4, DraftKind::mtp, k), &stats), plain(), "mtp K=" + std::to_string(k));
    EXPECT_GT(accepted(stats), 0) << "K=" << k;
    EXPECT_GT(stats.drafts_verified[static_cast<size_t>(k - 1)], 0) << "K=" << k << ": the last position never ran";
  }
}

// K chosen per step from measured costs (engine/draft_policy.h): every K is tried, and the tokens stay the plain ones.
TEST_F(Drafts, DraftCountsChosenPerStepGiveThePlainTokens) {
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    for (int32_t parallel : {1, 4}) {
      EngineOptions o = options(parallel, kind, 4);
      o.draft.measured = true;
      EngineStats stats;
      const std::string what = std::string(to_string(kind)) + " measured, parallel " + std::to_string(parallel);
      expect_same(run(requests(), o, &stats), plain(), what);
      EXPECT_GT(accepted(stats), 0) << what;
      for (size_t k = 0; k < stats.draft_choices.size(); ++k)
        EXPECT_GT(stats.draft_choices[k], 0) << what << " K=" << k;
    }
  }
}

TEST_F(Drafts, NgramDraftsGiveThePlainTokens) {
  for (int32_t parallel : {1, 4, 16}) {
    EngineStats stats;
    expect_same(run(requests(), options(parallel, DraftKind::ngram, 4), &stats), plain(),
                "ngram K=4 parallel " + std::to_string(parallel));
    EXPECT_GT(accepted(stats), 0) << "no prompt-lookup draft accepted at parallel " << parallel;
  }
}

// On a backend that cannot take back a chunk's fold (the GPU's, StateStorage::can_rewind_folds), the engine drafts
// no verify piece whose row t >= 1 completes a chunk: the drafts stop short of chunk ends, and the tokens stay plain.
// Here the CPU storage is asked to behave so; tests/cuda/drafts_cuda_test.cc runs the same on the GPU, where a piece
// over a fold would be refused.
TEST_F(Drafts, DraftsStoppingBeforeChunkEndsGiveThePlainTokens) {
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    EngineOptions o = options(4, kind, 4);
    o.draft.test_no_fold_rewinds = true;
    EngineStats stats;
    expect_same(run(requests(), o, &stats), plain(), std::string("no fold rewinds, ") + to_string(kind));
    EXPECT_GT(accepted(stats), 0) << to_string(kind);
  }
}

// A request that opts out is never drafted for, and gets the same tokens.
TEST_F(Drafts, OptedOutRequestsAreNotDrafted) {
  std::vector<Request> opted = requests();
  for (Request& r : opted) r.sampling.speculative = false;
  EngineStats stats;
  expect_same(run(opted, options(4, DraftKind::mtp, 3), &stats), plain(), "speculative false");
  EXPECT_EQ(stats.verify_pieces_total, 0);
}

// n > 1: the choices forked from one prefill decode with drafts like any sequence.
TEST_F(Drafts, ChoicesGiveThePlainTokens) {
  const std::vector<Request> choices = testing::draft_choices(*tokenizer_);
  const auto run_choices = [&](EngineOptions o, EngineStats* stats) {
    return testing::run_draft_choices(*model_, tokenizer_, choices, o, stats);
  };
  const auto expected = run_choices(options(4), nullptr);
  for (DraftKind kind : {DraftKind::mtp, DraftKind::ngram}) {
    EngineStats stats;
    expect_same(run_choices(options(4, kind, 3), &stats), expected, std::string("n=3 ") + to_string(kind));
    if (kind == DraftKind::mtp) {
      EXPECT_GT(accepted(stats), 0);
    }
  }
}

// Planted controls: the same comparison must catch a verifier that takes drafts unchecked, and one that leaves the
// rows of rejected drafts in the GDN state. Returns how many requests' tokens differ from plain decoding's.
size_t differing_with(void (*plant)(DraftOptions&)) {
  EngineOptions o = Drafts::options(4, DraftKind::mtp, 3);
  plant(o.draft);
  const auto got = Drafts::run(Drafts::requests(), o);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i].tokens != Drafts::plain()[i].tokens;
  return differ;
}

TEST_F(Drafts, DraftsTakenUncheckedAreCaught) {
  EXPECT_GT(differing_with([](DraftOptions& d) { d.test_accept_unchecked = true; }), 0u);
}

TEST_F(Drafts, RejectedRowsLeftInTheStateAreCaught) {
  EXPECT_GT(differing_with([](DraftOptions& d) { d.test_skip_rewind = true; }), 0u);
}

// A model without an MTP layer refuses --draft mtp, and K outside 1..4 is refused. (A backend that cannot take rows
// back is refused too: engine_test's DraftingOnAStorageThatCannotRewindIsRefused.)
TEST_F(Drafts, DraftingNeedsWhatItUses) {
  const std::string tiny = ::duet::testing::tests_dir() + "/fixtures/models/tiny-text";
  auto no_mtp = model::Model::load(tiny);
  ASSERT_FALSE(no_mtp->has_mtp());
  try {
    Engine engine(*no_mtp, nullptr, options(1, DraftKind::mtp));
    ADD_FAILURE() << "--draft mtp on a model without an MTP layer was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MTP layer"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(Engine(*no_mtp, nullptr, options(1, DraftKind::ngram)));
  EXPECT_THROW(Engine(*model_, nullptr, options(1, DraftKind::mtp, 5)), Error);
}

}  // namespace
}  // namespace duet::engine
