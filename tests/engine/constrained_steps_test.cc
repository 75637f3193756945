// Structured outputs' masks written during the step (issue 19: backend::MaskWriter, engine/step_masks.h) on the CPU
// backend, the reference every other backend is held to. The real tiny model (vocab 512) with a vocabulary of JSON-ish
// byte strings over its ids; id 511 has no bytes and is the constrained requests' stop token.
//  - the writers' contract at the model: each is called once per step, in the order of the step's samples, and a
//    step draws the same tokens as the same masks handed over ready-made (SampleSpec::allowed);
//  - through the engine: a constrained request's tokens equal a hand-run reference that makes each mask before its
//    step and gives it to the sampler as a finished span (what the engine did before the masks moved beside the
//    forward), forked choices' too; unconstrained requests beside constrained ones draw what they draw alone; the
//    engine counts one mask per constrained draw.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/piece_runner.h"
#include "engine/sampler.h"
#include "engine_harness.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "held_masks.h"
#include "json_vocabulary.h"
#include "tiny_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

using testing::json_vocabulary;
using testing::kStop;

std::vector<int32_t> prompt_of(int32_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>(rng() % 500));
  return ids;
}

class ConstrainedSteps : public testing::TinyModelTest {
 protected:
  void SetUp() override {
    TinyModelTest::SetUp();
    grammar_ = testing::notes_grammar(vocab());
    number_ = testing::integer_grammar(vocab());
  }

  static EngineOptions options(int32_t parallel) {
    EngineOptions o;
    o.parallel = parallel;
    o.context = 640;
    o.prefill_chunk = 64;
    o.queue_limit = 64;
    o.step_token_budget = 256;
    return o;
  }

  Request constrained(std::vector<int32_t> prompt, float temperature, uint64_t seed, float repetition = 1.0f,
                      bool number = false) const {
    Request r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.repetition_penalty = repetition;
    r.sampling.max_tokens = 40;
    r.sampling.stop_token_ids = {kStop};
    r.grammar = number ? number_ : grammar_;
    return r;
  }

  // Three seeded unconstrained requests of 24 tokens, and four constrained ones (greedy, seeded, seeded with a
  // repetition penalty, one prompt over a chunk; and integers, which may end at every digit).
  static std::vector<Request> unconstrained_requests() {
    std::vector<Request> plain;
    for (int i = 0; i < 3; ++i) {
      Request r;
      r.prompt = prompt_of(3 + 40 * i, 10 + static_cast<uint32_t>(i));
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 100 + static_cast<uint64_t>(i);
      r.sampling.max_tokens = 24;
      r.sampling.ignore_eos = true;
      plain.push_back(std::move(r));
    }
    return plain;
  }
  // Each request's outcome run alone, an engine of its own: what it must draw beside others.
  std::vector<Outcome> each_alone(const std::vector<Request>& requests) const {
    std::vector<Outcome> alone;
    for (const Request& r : requests) {
      Engine engine(*model_, nullptr, options(1));
      alone.push_back(drain(*engine.submit(r)));
    }
    return alone;
  }
  std::vector<Request> constrained_requests() const {
    return {constrained(prompt_of(7, 20), 0.0f, 0), constrained(prompt_of(90, 21), 0.9f, 31),
            constrained(prompt_of(30, 22), 1.0f, 32, 1.3f), constrained(prompt_of(12, 23), 1.0f, 33, 1.0f, true)};
  }

  // `requests` at once, every step that may go ahead launched ahead (structured-output rows too) or none; with
  // `masks_early` the planted fault EngineOptions::test_masks_before_tokens. Their outcomes in order, and the stats.
  struct AtOnce {
    std::vector<Outcome> outcomes;
    EngineStats stats;
  };
  AtOnce run_at_once(const std::vector<Request>& requests, EngineOptions::Lookahead lookahead,
                     bool masks_early = false) const {
    EngineOptions o = options(static_cast<int32_t>(requests.size()));
    o.lookahead = lookahead;
    o.lookahead_masked = true;
    o.test_masks_before_tokens = masks_early;
    Engine engine(*model_, nullptr, o);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Request& r : requests) handles.push_back(engine.submit(r));
    AtOnce out;
    for (auto& handle : handles) out.outcomes.push_back(drain(*handle));
    out.stats = engine.stats();
    return out;
  }

  // What the engine drew before its masks moved into the step: each mask made before its step from the request's own
  // grammar state (the grammar's tokens, the stop token where the document may end) and handed to the sampler as a
  // finished span; the stop rules of Sequence::accept. Tokens as the engine sends them (no stop token), the reason,
  // and the draws made under a mask.
  struct Reference {
    Outcome outcome;
    int64_t masks = 0;
  };
  Reference reference(const Request& request) const {
    PieceRunner runner(*model_, 1, 640);
    const int32_t slot = runner.open();
    grammar::Matcher matcher(request.grammar);
    backend::PenaltyCounts counts;  // the reference's own, independent of the engine's counts in the backend
    for (int32_t id : request.prompt) counts.add(backend::CountsUpdate::Kind::prompt, id);
    std::vector<float> logits =
        runner.run(model::Piece{.slot = slot, .tokens = request.prompt, .wants = model::RowOutput::last_logits})[0]
            .logits;
    Reference out;
    std::vector<uint32_t> mask(static_cast<size_t>(grammar_->vocabulary().words()));
    for (;;) {
      matcher.fill_mask(mask);
      if (matcher.can_end()) grammar::set_bit(mask, kStop);
      ++out.masks;
      const int64_t position = static_cast<int64_t>(request.prompt.size() + out.outcome.tokens.size());
      const int32_t id = sample_token(logits, request.sampling, counts, position, mask).id;
      counts.add(backend::CountsUpdate::Kind::generated, id);
      if (id == kStop) {
        out.outcome.finished.reason = FinishReason::stop;
        return out;
      }
      EXPECT_TRUE(matcher.accept_token(id)) << "the reference drew " << id << " outside its grammar";
      out.outcome.tokens.push_back(id);
      if (matcher.must_end()) {
        out.outcome.finished.reason = FinishReason::stop;
        return out;
      }
      if (static_cast<int32_t>(out.outcome.tokens.size()) >= request.sampling.max_tokens) {
        out.outcome.finished.reason = FinishReason::length;
        return out;
      }
      logits = runner
                   .run(model::Piece{.slot = slot,
                                     .tokens = std::span(&out.outcome.tokens.back(), 1),
                                     .wants = model::RowOutput::last_logits,
                                     .role = backend::RowRole::decode})[0]
                   .logits;
    }
  }

  std::shared_ptr<const grammar::CompiledGrammar> grammar_, number_;
};

// Records the order of the calls and writes a fixed mask.
struct RecordingWriter final : backend::MaskWriter {
  RecordingWriter(std::vector<int>& log, int name, std::vector<uint32_t> mask)
      : log(log), name(name), mask(std::move(mask)) {}
  size_t words() const override { return mask.size(); }
  void write(std::span<uint32_t> words) override {
    log.push_back(name);
    std::copy(mask.begin(), mask.end(), words.begin());
  }
  std::vector<int>& log;
  int name;
  std::vector<uint32_t> mask;
};

std::vector<uint32_t> every_third_id(int32_t vocab, int32_t offset) {
  std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32));
  for (int32_t id = offset; id < vocab; id += 3) grammar::set_bit(mask, id);
  return mask;
}

// One step of three decode pieces and a prefill piece with two forked draws, masks by writer, ready-made and none:
// the writers run once each, decode pieces' first (the step's row order), a piece's forks right after it; and the
// draws equal the same step's with every mask ready-made.
TEST_F(ConstrainedSteps, WritersRunOnceInSampleOrderAndDrawTheSameTokens) {
  const int32_t V = vocab();
  const std::vector<int32_t> prompt_a = prompt_of(70, 1), prompt_b = prompt_of(9, 2), prompt_c = prompt_of(5, 3),
                             prompt_d = prompt_of(12, 4);
  auto run = [&](bool writers, std::vector<int>* log) {
    PieceRunner runner(*model_, 4, 200);
    const int32_t a = runner.open(), b = runner.open(), c = runner.open(), d = runner.open();
    runner.run(std::vector<model::Piece>{{.slot = b, .tokens = prompt_b, .wants = model::RowOutput::none},
                                         {.slot = c, .tokens = prompt_c, .wants = model::RowOutput::none},
                                         {.slot = d, .tokens = prompt_d, .wants = model::RowOutput::none}});
    std::vector<int> calls;
    const std::vector<uint32_t> mask_a = every_third_id(V, 0), mask_b = every_third_id(V, 1),
                                mask_fork = every_third_id(V, 2), mask_d = every_third_id(V, 1);
    RecordingWriter write_a(calls, 0, mask_a), write_b(calls, 1, mask_b), write_fork1(calls, 2, mask_fork),
        write_fork2(calls, 3, mask_a);
    backend::SampleSpec spec_a, spec_b, spec_c, spec_d, fork1, fork2;
    spec_b.temperature = 0.8f, spec_b.seed = 3, spec_b.position = 9;
    spec_c.temperature = 0.8f, spec_c.seed = 4, spec_c.position = 5;
    spec_d.position = 12;
    spec_d.allowed = mask_d;  // ready-made either way
    fork1.temperature = fork2.temperature = 1.0f, fork1.seed = 5, fork2.seed = 6;
    spec_a.position = fork1.position = fork2.position = 70;
    if (writers) {
      spec_a.mask_writer = &write_a, spec_b.mask_writer = &write_b;
      fork1.mask_writer = &write_fork1, fork2.mask_writer = &write_fork2;
    } else {
      spec_a.allowed = mask_a, spec_b.allowed = mask_b, fork1.allowed = mask_fork, fork2.allowed = mask_a;
    }
    const backend::SampleSpec* forks[] = {&fork1, &fork2};
    const int32_t next[] = {7, 8, 9};
    const auto results = runner.run(std::vector<model::Piece>{
        {.slot = a, .tokens = prompt_a, .wants = model::RowOutput::sampled, .sample = &spec_a, .fork_samples = forks},
        {.slot = b,
         .tokens = std::span(&next[0], 1),
         .wants = model::RowOutput::sampled,
         .role = backend::RowRole::decode,
         .sample = &spec_b},
        {.slot = c,
         .tokens = std::span(&next[1], 1),
         .wants = model::RowOutput::sampled,
         .role = backend::RowRole::decode,
         .sample = &spec_c},
        {.slot = d,
         .tokens = std::span(&next[2], 1),
         .wants = model::RowOutput::sampled,
         .role = backend::RowRole::decode,
         .sample = &spec_d}});
    if (log != nullptr) *log = calls;
    std::vector<int32_t> ids;
    for (const auto& r : results) ids.push_back(r.sampled.id);
    for (const auto& f : results[0].fork_sampled) ids.push_back(f.id);
    EXPECT_TRUE(grammar::test_bit(mask_a, ids[0]) && grammar::test_bit(mask_b, ids[1]) &&
                grammar::test_bit(mask_d, ids[3]) && grammar::test_bit(mask_fork, ids[4]) &&
                grammar::test_bit(mask_a, ids[5]))
        << "a draw outside its mask";
    return ids;
  };
  std::vector<int> calls;
  const std::vector<int32_t> written = run(true, &calls);
  EXPECT_EQ(calls, (std::vector<int>{1, 0, 2, 3})) << "decode piece b's writer first, then a's and its forks'";
  EXPECT_EQ(written, run(false, nullptr)) << "masks by writer drew other tokens than the same masks ready-made";
}

// Four constrained requests (greedy, seeded, seeded with a repetition penalty, one prompt over a chunk; and integers,
// which may end at every digit) beside three unconstrained seeded ones, seven at once: every constrained one draws the
// reference's tokens and ends as it does (by its document or its stop token: both happen), the unconstrained ones draw
// what they draw alone, and the engine counts a mask per constrained draw.
TEST_F(ConstrainedSteps, ConstrainedAndUnconstrainedRequestsShareStepsExactly) {
  const std::vector<Request> plain = unconstrained_requests(), shaped = constrained_requests();
  const std::vector<Outcome> alone = each_alone(plain);
  Engine engine(*model_, nullptr, options(7));
  std::vector<std::shared_ptr<RequestHandle>> plain_handles, shaped_handles;
  for (size_t i = 0; i < shaped.size(); ++i) {
    if (i < plain.size()) plain_handles.push_back(engine.submit(plain[i]));
    shaped_handles.push_back(engine.submit(shaped[i]));
  }
  for (size_t i = 0; i < plain.size(); ++i) {
    const Outcome got = drain(*plain_handles[i]);
    EXPECT_EQ(got.tokens, alone[i].tokens) << "unconstrained request " << i << " changed beside constrained ones";
    EXPECT_EQ(got.finished.reason, FinishReason::length);
  }
  int64_t masks = 0, by_stop_token = 0;
  for (size_t i = 0; i < shaped.size(); ++i) {
    const Reference want = reference(shaped[i]);
    const Outcome got = drain(*shaped_handles[i]);
    EXPECT_EQ(got.tokens, want.outcome.tokens) << "constrained request " << i;
    EXPECT_EQ(got.finished.reason, want.outcome.finished.reason) << "constrained request " << i;
    masks += want.masks;
    by_stop_token += want.masks > static_cast<int64_t>(want.outcome.tokens.size()) ? 1 : 0;
  }
  EXPECT_EQ(by_stop_token, 1) << "the integers' request should end by its stop token, the others by their documents";
  EXPECT_EQ(engine.stats().grammar_masks_total, masks) << "one mask per constrained draw";
  EXPECT_GT(engine.stats().grammar_mask_seconds_total, 0.0);
}

// Constrained rows in steps launched ahead (EngineOptions::lookahead_masked; the CPU backend holds masks as the CUDA
// backend does): the same seven requests as above, every step launched ahead where it may be (Lookahead::always):
// every constrained request draws the reference's tokens and ends as it does, the unconstrained ones what they draw
// alone, a mask per constrained draw, and steps went ahead with constrained rows in them. The control: the held masks
// written before the step before is read (the grammars a token behind) break some constrained request.
TEST_F(ConstrainedSteps, ConstrainedRowsLaunchedAheadDrawTheReferenceTokens) {
  const std::vector<Request> plain = unconstrained_requests(), shaped = constrained_requests();
  const std::vector<Outcome> alone = each_alone(plain);
  std::vector<Reference> want;
  for (const Request& r : shaped) want.push_back(reference(r));
  // The seven at once (the constrained ones first), constrained rows launched ahead; how many constrained requests
  // are unlike their references.
  std::vector<Request> all = shaped;
  all.insert(all.end(), plain.begin(), plain.end());
  auto run = [&](bool masks_early) {
    const AtOnce got = run_at_once(all, EngineOptions::Lookahead::always, masks_early);
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_EQ(got.outcomes[shaped.size() + i].tokens, alone[i].tokens) << "unconstrained request " << i;
    int unlike = 0;
    int64_t masks = 0;
    for (size_t i = 0; i < shaped.size(); ++i) {
      const Outcome& outcome = got.outcomes[i];
      unlike += outcome.tokens == want[i].outcome.tokens && outcome.finished.reason == want[i].outcome.finished.reason
                    ? 0
                    : 1;
      masks += want[i].masks;
      if (!masks_early) {
        EXPECT_EQ(outcome.tokens, want[i].outcome.tokens) << "constrained request " << i;
        EXPECT_EQ(outcome.finished.reason, want[i].outcome.finished.reason) << "constrained request " << i;
      }
    }
    EXPECT_GT(got.stats.steps_ahead_total, 10) << "steps with constrained rows should have gone ahead";
    if (!masks_early) EXPECT_EQ(got.stats.grammar_masks_total, masks) << "one mask per constrained draw";
    return unlike;
  };
  EXPECT_EQ(run(false), 0);
  EXPECT_GT(run(true), 0) << "control: masks written a token early went unnoticed";
}

// Rows whose grammar begins after a token (Request::grammar_after: a reasoning model's "</think>") in steps launched
// ahead: until that token a row's held writer allows every id (as no mask does), from the token after it the grammar's
// mask. The four constrained requests, each beginning its grammar after the token its free run draws at place 8 + i,
// beside the three unconstrained: every request draws and ends as with no step launched ahead, and steps went ahead.
// Control: the held masks written a token early draw the grammar's first token unconstrained, which changes some
// request.
TEST_F(ConstrainedSteps, RowsWhoseGrammarBeginsLaterLaunchedAheadDrawAsPlannedAfter) {
  std::vector<Request> all = constrained_requests();
  for (size_t i = 0; i < all.size(); ++i) {
    Request free = all[i];
    free.grammar = nullptr;
    Engine engine(*model_, nullptr, options(1));
    const Outcome run = drain(*engine.submit(free));
    ASSERT_GT(run.tokens.size(), 8 + i) << "request " << i << "'s free run ended too soon to pick its grammar_after";
    all[i].grammar_after = run.tokens[8 + i];
  }
  const std::vector<Request> plain = unconstrained_requests();
  all.insert(all.end(), plain.begin(), plain.end());
  const AtOnce planned_after = run_at_once(all, EngineOptions::Lookahead::never);
  const AtOnce ahead = run_at_once(all, EngineOptions::Lookahead::always);
  EXPECT_EQ(planned_after.stats.steps_ahead_total, 0);
  // All but the prompts' steps and a few around them: 30 of 34 here, and 21 when rows whose grammar had not begun kept
  // steps from going ahead (tried by hand).
  EXPECT_GE(ahead.stats.steps_ahead_total, ahead.stats.steps_total - 6)
      << "steps with rows of grammars not begun should have gone ahead";
  int unlike = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(ahead.outcomes[i].tokens, planned_after.outcomes[i].tokens) << "request " << i;
    EXPECT_EQ(ahead.outcomes[i].finished.reason, planned_after.outcomes[i].finished.reason) << "request " << i;
  }
  EXPECT_GT(planned_after.stats.grammar_masks_total, 0) << "no grammar began: the test shows nothing";
  const AtOnce early = run_at_once(all, EngineOptions::Lookahead::always, true);
  for (size_t i = 0; i < all.size(); ++i)
    unlike += early.outcomes[i].tokens == planned_after.outcomes[i].tokens ? 0 : 1;
  EXPECT_GT(unlike, 0) << "control: masks written a token early went unnoticed";
}

// Model::launch_holding_masks on the tiny model (the CPU backend holds masks as the CUDA backend does): the writer runs
// at release and never at launch nor for a dropped step (tests/engine/held_masks.h's checks).
TEST_F(ConstrainedSteps, HeldMasksAreWrittenAtReleaseAndNeverWhenDropped) {
  const std::vector<int32_t> prompt_a = prompt_of(20, 5), prompt_b = prompt_of(9, 6);
  testing::expect_held_masks_kept(*model_, prompt_a, prompt_b);
}

// n choices of one constrained prompt: each forked choice's first token is drawn from the first choice's last prompt
// row under its own mask (written during that step), then it goes on alone; each equals the reference of its request.
TEST_F(ConstrainedSteps, ForkedChoicesDrawUnderTheirOwnMasks) {
  std::vector<Request> choices;
  for (uint64_t seed = 1; seed <= 3; ++seed) choices.push_back(constrained(prompt_of(66, 40), 1.0f, seed));
  Engine engine(*model_, nullptr, options(3));
  auto handles = engine.submit_choices(choices);
  int64_t masks = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome got = drain(*handles[i]);
    const Reference want = reference(choices[i]);
    EXPECT_EQ(got.tokens, want.outcome.tokens) << "choice " << i;
    EXPECT_EQ(got.finished.reason, want.outcome.finished.reason) << "choice " << i;
    masks += want.masks;
  }
  EXPECT_EQ(engine.stats().grammar_masks_total, masks);
}

}  // namespace
}  // namespace duet::engine
