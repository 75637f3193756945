// The prompt cache through the engine, on the real tiny model: requests that resume from cached prefixes give exactly
// the tokens of an engine without a cache (greedy and seeded), with hits at several block boundaries, beside other
// sequences in the same steps, over a multi-turn conversation whose decoded replies are prefilled again, under a
// budget so small that entries are evicted all the time, and with a planted hash collision. Every comparison's
// reference is the same engine code with the cache off.
#include <gtest/gtest.h>

#include <set>

#include "engine/engine.h"
#include "engine_harness.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

class PromptCacheEngine : public testing::TinyModelTest {
 protected:
  static EngineOptions options(int32_t parallel, size_t cache_bytes) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 640;
    o.prefill_chunk = 128;  // cuts at 128s, and at the cache's block ends between them
    o.queue_limit = 64;
    o.step_token_budget = 256;
    o.prompt_cache_bytes = cache_bytes;
    return o;
  }
  static constexpr size_t kRoomy = 64u << 20;

  static std::vector<int32_t> ids(size_t length, uint32_t seed) {
    std::vector<int32_t> out(length);
    for (size_t i = 0; i < length; ++i)
      out[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % static_cast<size_t>(vocab()));
    return out;
  }
  static std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  // Requests that share prefixes of several lengths: a system prompt of 150 tokens with different turns after it, a
  // shorter cut of it, the same prompt twice, and a long one with a long shared beginning.
  static std::vector<Request> sharing_requests(bool seeded) {
    const std::vector<int32_t> system = ids(150, 1), long_one = ids(330, 2);
    const std::vector<std::vector<int32_t>> prompts = {join(system, ids(20, 3)),
                                                       join(system, ids(45, 4)),
                                                       join({system.begin(), system.begin() + 100}, ids(9, 5)),
                                                       join(system, ids(20, 3)),
                                                       long_one,
                                                       join(long_one, ids(3, 6)),
                                                       join(system, ids(120, 7)),
                                                       ids(100, 8),
                                                       ids(100, 8)};
    std::vector<Request> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r = testing::greedy_request(prompts[i], 10);
      if (seeded) {
        r.sampling.temperature = 0.9f;
        r.sampling.top_p = 0.95f;
        r.sampling.seed = 77 + i;
      }
      requests.push_back(std::move(r));
    }
    return requests;
  }

  void check_resumed_equals_fresh(bool seeded) {
    const std::vector<Request> requests = sharing_requests(seeded);
    Engine fresh(*model_, nullptr, options(4, 0));
    const std::vector<Outcome> reference = testing::run_serially(fresh, requests);
    EXPECT_EQ(fresh.stats().prompt_cache_hits, 0);
    Engine cached(*model_, nullptr, options(4, kRoomy));
    const std::vector<Outcome> serial = testing::run_serially(cached, requests);
    testing::expect_same_tokens(serial, reference, "resumed, one at a time");
    std::set<int32_t> boundaries;
    for (const Outcome& o : serial) {
      EXPECT_EQ(o.finished.cached_tokens % 64, 0);
      EXPECT_LT(o.finished.cached_tokens, o.finished.prompt_tokens) << "a prompt's last token is always prefilled";
      if (o.finished.cached_tokens > 0) boundaries.insert(o.finished.cached_tokens);
    }
    EXPECT_GE(boundaries.size(), 3u) << "hits at several block boundaries";
    // Again, all at once: resumed sequences share steps with each other and with fresh prefills and decodes.
    testing::expect_same_tokens(testing::run_concurrently(cached, requests), reference, "resumed, concurrently");
    const EngineStats stats = cached.stats();
    EXPECT_GT(stats.prompt_cache_hits, 0);
    EXPECT_GT(stats.prompt_cache_tokens_total, 0);
    EXPECT_EQ(stats.prompt_cache_hits + stats.prompt_cache_misses, 2 * static_cast<int64_t>(requests.size()));
    EXPECT_GT(stats.prompt_cache_bytes_held, 0u);
    EXPECT_LE(stats.prompt_cache_bytes_held, stats.prompt_cache_bytes);
  }
};

TEST_F(PromptCacheEngine, ResumedGreedyEqualsFresh) { check_resumed_equals_fresh(false); }
TEST_F(PromptCacheEngine, ResumedSeededEqualsFresh) { check_resumed_equals_fresh(true); }

// Each turn repeats the conversation so far with the decoded reply in it: the reply's tokens were decode rows, so the
// cache resumes only up to the last block end of the earlier prompt and the reply is prefilled again.
TEST_F(PromptCacheEngine, AMultiTurnConversationResumesItsEarlierPrompts) {
  Engine fresh(*model_, nullptr, options(2, 0));
  Engine cached(*model_, nullptr, options(2, kRoomy));
  std::vector<int32_t> conversation = ids(140, 11);
  for (int turn = 0; turn < 3; ++turn) {
    const Request request = testing::greedy_request(conversation, 24);
    const Outcome want = drain(*fresh.submit(request)), got = drain(*cached.submit(request));
    testing::expect_same_tokens({got}, {want}, "turn " + std::to_string(turn));
    if (turn > 0) {
      // The earlier turn's prompt ended at most one reply and one user message ago; its last block end is resumed.
      EXPECT_GT(got.finished.cached_tokens, 0) << "turn " << turn;
    }
    conversation = join(join(conversation, got.tokens), ids(30 + static_cast<size_t>(turn), 12 + turn));
  }
}

// A chat prompt ends with a generation header the next turn does not repeat (it renders the reply's own header):
// the hint keeps the state where the header starts, so the next turn resumes there; without it, the only entries lie
// past the point where the turns part, and the next turn finds nothing (the control).
TEST_F(PromptCacheEngine, TheHintKeepsTheStateWhereTheNextTurnParts) {
  const std::vector<int32_t> history = ids(150, 40), header = ids(70, 41), next_turn = ids(90, 42);
  for (const bool hinted : {true, false}) {
    Engine cached(*model_, nullptr, options(1, kRoomy));
    Request first = testing::greedy_request(join(history, header), 4);
    if (hinted) first.cache_hints = {static_cast<int32_t>(history.size())};
    drain(*cached.submit(first));
    const Outcome second = drain(*cached.submit(testing::greedy_request(join(history, next_turn), 4)));
    EXPECT_EQ(second.finished.cached_tokens, hinted ? 128 : 0) << (hinted ? "hinted" : "the control, unhinted");
  }
}

// A budget of one snapshot and two pages: nearly every entry is evicted at once, and no answer changes.
TEST_F(PromptCacheEngine, ATinyBudgetEvictsButNeverChangesAnAnswer) {
  const size_t tiny = model_->sequence_fixed_bytes() + 2 * model_->kv_page_bytes();
  const std::vector<Request> requests = sharing_requests(false);
  Engine fresh(*model_, nullptr, options(3, 0));
  Engine cached(*model_, nullptr, options(3, tiny));
  const auto reference = testing::run_serially(fresh, requests);
  testing::expect_same_tokens(testing::run_serially(cached, requests), reference, "tiny budget, serially");
  testing::expect_same_tokens(testing::run_concurrently(cached, requests), reference, "tiny budget, concurrently");
  const EngineStats stats = cached.stats();
  EXPECT_GT(stats.prompt_cache_evictions, 0);
  EXPECT_GT(stats.prompt_cache_hits, 0) << "the 100-token prompt sent twice fits the budget";
  EXPECT_LE(stats.prompt_cache_bytes_held, tiny);
}

// Every block hashes alike: lookups meet other prompts' entries and must reject them by their tokens.
TEST_F(PromptCacheEngine, APlantedHashCollisionNeverChangesAnAnswer) {
  const std::vector<Request> requests = sharing_requests(true);
  Engine fresh(*model_, nullptr, options(4, 0));
  EngineOptions colliding = options(4, kRoomy);
  colliding.prompt_cache_block_hash = [](uint64_t, std::span<const int32_t>) { return uint64_t{7}; };
  Engine cached(*model_, nullptr, colliding);
  testing::expect_same_tokens(testing::run_serially(cached, requests), testing::run_serially(fresh, requests),
                              "colliding hashes");
  EXPECT_GT(cached.stats().prompt_cache_hits, 0);
}

// Two requests resume one cached prefix (its pages shared three ways); one is cancelled mid-decode, and a new long
// prompt then takes pages (lowest ids first, where the shared prefix lives) and writes them while the other decodes.
// Had the cancel freed a shared page, the survivor would read the newcomer's K/V.
TEST_F(PromptCacheEngine, CancellingASharerFreesNothingAnotherReads) {
  const std::vector<int32_t> system = ids(200, 30);
  const Request survivor = testing::greedy_request(join(system, ids(10, 31)), 40);
  const Request newcomer = testing::greedy_request(ids(400, 32), 20);
  Engine fresh(*model_, nullptr, options(3, 0));
  const Outcome want_survivor = drain(*fresh.submit(survivor)), want_newcomer = drain(*fresh.submit(newcomer));

  // Room for one snapshot and the prefix's three pages: the newcomer's admission may evict the entry too.
  Engine cached(*model_, nullptr, options(3, model_->sequence_fixed_bytes() + 3 * model_->kv_page_bytes()));
  drain(*cached.submit(testing::greedy_request(join(system, ids(5, 33)), 1)));  // leaves the prefix at 192
  auto cancelled = cached.submit(testing::greedy_request(join(system, ids(7, 34)), 300));
  auto kept = cached.submit(survivor);
  const std::optional<Event> first = cancelled->next(std::chrono::seconds(60));
  ASSERT_TRUE(first && std::holds_alternative<TokenEvent>(*first));
  cancelled->cancel();
  EXPECT_EQ(drain(*cancelled).finished.reason, FinishReason::cancelled);
  auto late = cached.submit(newcomer);
  const Outcome got_survivor = drain(*kept), got_newcomer = drain(*late);
  EXPECT_EQ(got_survivor.finished.cached_tokens, 192);
  testing::expect_same_tokens({got_survivor, got_newcomer}, {want_survivor, want_newcomer}, "after the cancel");
}

TEST_F(PromptCacheEngine, ZeroBudgetTurnsItOff) {
  Engine engine(*model_, nullptr, options(1, 0));
  const Outcome a = drain(*engine.submit(testing::greedy_request(ids(200, 20), 4)));
  const Outcome b = drain(*engine.submit(testing::greedy_request(ids(200, 20), 4)));
  EXPECT_EQ(b.finished.cached_tokens, 0);
  EXPECT_EQ(b.tokens, a.tokens);
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.prompt_cache_hits + stats.prompt_cache_misses, 0);
  EXPECT_EQ(stats.prompt_cache_bytes, 0u);
}

}  // namespace
}  // namespace duet::engine
