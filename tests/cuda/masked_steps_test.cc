// Structured outputs' masks written beside the forward on the CUDA backend (issue 19; backend::MaskWriter,
// mask_upload.h): a masked step's graph (or its eager launches) ends at the logits and goes to the device first; the
// host then writes every mask into pinned memory, the masks go up on a stream of their own, and the sampler, launched
// after the graph, waits for that copy. Unmasked steps keep one graph with the sampler inside. On a machine without a
// GPU every test reports skipped with the reason.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <vector>

#include "../engine/engine_harness.h"
#include "../engine/held_masks.h"
#include "../engine/json_vocabulary.h"
#include "../model/golden_fixtures.h"
#include "backend/cuda/device_rows.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "graphed_runs.h"
#include "model/model.h"

namespace duet::model {
namespace {

using testing::expect_same_sequences;
using testing::Goldens;
using testing::load_with_env;
using testing::load_without_graphs;
using testing::prefill_slices;

class CudaMaskedSteps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DUET_REQUIRE_GPU();
    model_ = Model::load(testing::model_fixture(GetParam()), "cuda");
  }
  std::unique_ptr<Model> model_;
};

// Eight sequences decode 24 steps. Sequences 0 and 5 are never masked (the unconstrained rows beside constrained
// ones); the others are masked in most steps, with masks that change every step (20% of the vocabulary, other ids
// each time); now and then no row of a step is masked (its single graph replays), and step 12 masks all the others.
constexpr int kSequences = 8, kSteps = 24;
bool never_masked(int sequence) { return sequence == 0 || sequence == 5; }
bool masked(int sequence, int step) {
  if (never_masked(sequence) || step % 7 == 3) return false;
  return step == 12 || (sequence + step) % 3 != 0;
}
bool allows(int sequence, int step, int64_t id) {
  const uint64_t h = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) ^ (sequence * 131u + step * 7919u);
  return (h >> 17) % 5 == 0;
}

enum class Masks { none, ready, writers };

// Writes its mask when the backend asks, and checks when that is: the step's stream is asked for
// (cuda::step_stream_of), which the backend refuses while the step is being captured or replayed, i.e. before its graph
// went to the device. Counts the writes, those asked too early, and those made while the device was still busy with the
// step.
struct CheckingWriter final : backend::MaskWriter {
  const std::vector<uint32_t>* mask = nullptr;
  backend::Backend* backend = nullptr;
  int* writes = nullptr;
  int* too_early = nullptr;
  int* while_busy = nullptr;
  size_t words() const override { return mask->size(); }
  void write(std::span<uint32_t> words) override {
    ++*writes;
    try {
      if (cudaStreamQuery(backend::cuda::step_stream_of(*backend)) == cudaErrorNotReady) {
        ++*while_busy;
        // "Not ready" is no error; should the runtime keep it as the last one, the backend's next launch check must
        // not read it as its own.
        if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      }
    } catch (const std::exception&) {
      ++*too_early;
    }
    std::copy(mask->begin(), mask->end(), words.begin());
  }
};

struct MaskedRun {
  std::vector<std::vector<int32_t>> tokens;  // per sequence
  int writes = 0, too_early = 0, while_busy = 0;
};

MaskedRun run_masked(Model& model, Masks how, const std::vector<int32_t>& source,
                     const std::vector<std::vector<std::vector<uint32_t>>>& masks) {
  engine::PieceRunner runner(model, kSequences, 400);
  const auto [slots, prompts] = prefill_slices(runner, source, kSequences, 5, 40, 7);
  MaskedRun out;
  out.tokens.resize(kSequences);
  std::vector<int32_t> next(kSequences, 1);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<backend::SampleSpec> specs(kSequences);
    std::vector<CheckingWriter> writers(kSequences);
    std::vector<Piece> pieces;
    for (int i = 0; i < kSequences; ++i) {
      backend::SampleSpec& spec = specs[i];
      spec.temperature = i % 2 ? 0.9f : 0.0f;
      spec.seed = 11 + static_cast<uint64_t>(i);
      spec.position = static_cast<int64_t>(prompts[i].size()) + step;
      if (masked(i, step) && how == Masks::ready) spec.allowed = masks[i][step];
      if (masked(i, step) && how == Masks::writers) {
        writers[i].mask = &masks[i][step];
        writers[i].backend = model.products_backend();
        writers[i].writes = &out.writes, writers[i].too_early = &out.too_early;
        writers[i].while_busy = &out.while_busy;
        spec.mask_writer = &writers[i];
      }
      pieces.push_back({.slot = slots[i],
                        .tokens = std::span(&next[i], 1),
                        .wants = RowOutput::sampled,
                        .role = backend::RowRole::decode,
                        .sample = &spec});
    }
    const auto results = runner.run(pieces);
    for (int i = 0; i < kSequences; ++i) {
      next[i] = results[i].sampled.id;
      out.tokens[i].push_back(next[i]);
    }
  }
  return out;
}

struct Scenario {
  std::vector<int32_t> source;
  std::vector<std::vector<std::vector<uint32_t>>> masks;  // [sequence][step], empty where unmasked
  int masked_draws = 0;
};
Scenario scenario(const std::string& fixture, int64_t vocab) {
  Scenario s;
  s.source = Goldens(testing::golden_fixture(fixture, "fp32")).i32("len300.ids");
  const size_t words = static_cast<size_t>((vocab + 31) / 32);
  s.masks.assign(kSequences, std::vector<std::vector<uint32_t>>(kSteps));
  for (int i = 0; i < kSequences; ++i)
    for (int step = 0; step < kSteps; ++step) {
      if (!masked(i, step)) continue;
      ++s.masked_draws;
      s.masks[i][step].assign(words, 0u);
      for (int64_t id = 0; id < vocab; ++id)
        if (allows(i, step, id)) s.masks[i][step][id / 32] |= 1u << (id % 32);
    }
  return s;
}

int outside_masks(const MaskedRun& run) {
  int outside = 0;
  for (int i = 0; i < kSequences; ++i)
    for (int step = 0; step < kSteps; ++step)
      outside += masked(i, step) && !allows(i, step, run.tokens[i][step]) ? 1 : 0;
  return outside;
}

// Masks by writer, graphed: each writer runs once per masked draw, never before its step's graph went to the device;
// every masked token is inside its mask; the tokens equal the same masks handed over ready-made (graphed) and the
// writers' on a backend without graphs; the never-masked sequences draw exactly what they draw when no row of any step
// is masked. Control: the masks change the masked sequences' tokens.
TEST_P(CudaMaskedSteps, MaskedStepsSplitAroundTheMasks) {
  const Scenario s = scenario(GetParam(), model_->config().vocab_size);
  ASSERT_NE(model_->products_backend(), nullptr);
  const MaskedRun written = run_masked(*model_, Masks::writers, s.source, s.masks);
  std::printf("%s: %d masks written, %d while the device still ran the step's forward\n", GetParam().c_str(),
              written.writes, written.while_busy);
  EXPECT_EQ(written.writes, s.masked_draws) << "a mask writer was not called exactly once per masked draw";
  EXPECT_EQ(written.too_early, 0) << written.too_early
                                  << " masks were asked for before their step's graph was launched";
  EXPECT_EQ(outside_masks(written), 0) << outside_masks(written) << " tokens outside their masks";

  const MaskedRun ready = run_masked(*model_, Masks::ready, s.source, s.masks);
  expect_same_sequences(written.tokens, ready.tokens);
  auto eager_model = load_without_graphs(GetParam());
  const MaskedRun eager = run_masked(*eager_model, Masks::writers, s.source, s.masks);
  expect_same_sequences(written.tokens, eager.tokens);
  EXPECT_EQ(eager.too_early, 0);

  const MaskedRun plain = run_masked(*model_, Masks::none, s.source, s.masks);
  const MaskedRun plain_eager = run_masked(*eager_model, Masks::none, s.source, s.masks);
  expect_same_sequences(plain.tokens, plain_eager.tokens);
  int changed = 0;
  for (int i = 0; i < kSequences; ++i) {
    if (never_masked(i)) {
      EXPECT_EQ(written.tokens[i], plain.tokens[i]) << "unmasked sequence " << i << " changed beside masked rows";
    } else {
      changed += written.tokens[i] != plain.tokens[i] ? 1 : 0;
    }
  }
  EXPECT_GT(changed, 0) << "the masks changed no token: the test could not see them";
}

// The planted fault the test above must catch (DUET_TEST_MASKS_AFTER_COPY=1): the copy goes up first and the host
// writes the masks once it is done, so each masked row is drawn under the masks of an earlier step. Graphed and eager,
// the tokens must then leave their masks.
TEST_P(CudaMaskedSteps, MasksWrittenAfterTheirCopyAreCaught) {
  const Scenario s = scenario(GetParam(), model_->config().vocab_size);
  for (const char* graphs : {"1", "0"}) {
    setenv("DUET_CUDA_GRAPHS", graphs, 1);
    auto faulty = load_with_env(GetParam(), "DUET_TEST_MASKS_AFTER_COPY", "1");
    unsetenv("DUET_CUDA_GRAPHS");
    const MaskedRun run = run_masked(*faulty, Masks::writers, s.source, s.masks);
    // MaskedStepsSplitAroundTheMasks wants none outside: one is enough to fail it (the H200 drew 5 of the run's tokens
    // outside their masks here, graphed and eager).
    EXPECT_GT(outside_masks(run), 0) << "graphs " << graphs
                                     << ": masks written after their copy drew only allowed tokens; the check of "
                                        "MaskedStepsSplitAroundTheMasks cannot see a mask that comes too late";
  }
}

// Constrained rows in steps launched ahead (engine::EngineOptions::lookahead_masked, Model::launch_holding_masks): the
// step's forward goes to the device while the step before is still drawn, and its sampler waits there for the masks
// the host writes once that step is read and its tokens are in the grammars (every id for a row whose grammar has not
// begun: on the GPU too, an all-ones mask must draw what no mask draws). Constrained requests (the notes schema greedy,
// seeded and penalized; an integer, which may end at every digit; two of them begun only after a token) beside
// unconstrained seeded ones draw the tokens and end as they do with no step launched ahead, graphed and eager, and
// steps went ahead with constrained rows in them. The control: the held masks written a token early
// (test_masks_before_tokens) change some request.
struct AheadOutcome {
  std::vector<engine::testing::Outcome> outcomes;
  int64_t steps_ahead = 0;
};

// Seven requests: the notes schema greedy, seeded (its grammar begun only after the token its free run draws at place
// 6, as a reasoning model's "</think>"), penalized; an integer (begun likewise after place 4); three unconstrained.
std::vector<engine::Request> constrained_ahead_requests(Model& model) {
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  const auto notes = engine::testing::notes_grammar(vocab), integer = engine::testing::integer_grammar(vocab);
  std::vector<engine::Request> requests;
  for (int i = 0; i < 7; ++i) {
    engine::Request r;
    for (int t = 0; t < 5 + 23 * i; ++t) r.prompt.push_back((37 * t + 11 * i) % 500);
    r.sampling.temperature = i == 0 ? 0.0f : 0.9f;
    r.sampling.seed = 50 + static_cast<uint64_t>(i);
    r.sampling.repetition_penalty = i == 2 ? 1.3f : 1.0f;
    r.sampling.max_tokens = 32;
    r.sampling.stop_token_ids = {engine::testing::kStop};
    if (i >= 4) r.sampling.ignore_eos = true;
    if (i == 1 || i == 3) {  // the place of its grammar_after: from its free run
      engine::EngineOptions o;
      o.parallel = 1;
      o.context = 640;
      engine::Engine engine(model, nullptr, o);
      const engine::testing::Outcome free = engine::testing::drain(*engine.submit(r));
      const size_t place = i == 1 ? 6 : 4;
      if (free.tokens.size() > place) r.grammar_after = free.tokens[place];
    }
    if (i < 4) r.grammar = i == 3 ? integer : notes;
    requests.push_back(std::move(r));
  }
  return requests;
}

AheadOutcome run_constrained_ahead(Model& model, const std::vector<engine::Request>& requests,
                                   engine::EngineOptions::Lookahead lookahead, bool masks_early) {
  engine::EngineOptions o;
  o.parallel = 7;
  o.context = 640;
  o.prefill_chunk = 64;
  o.step_token_budget = 256;
  o.lookahead = lookahead;
  o.lookahead_masked = true;
  o.test_masks_before_tokens = masks_early;
  engine::Engine engine(model, nullptr, o);
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (const engine::Request& r : requests) handles.push_back(engine.submit(r));
  AheadOutcome out;
  for (auto& handle : handles) out.outcomes.push_back(engine::testing::drain(*handle));
  out.steps_ahead = engine.stats().steps_ahead_total;
  return out;
}

int unlike_outcomes(const AheadOutcome& got, const AheadOutcome& want) {
  int unlike = 0;
  for (size_t i = 0; i < want.outcomes.size(); ++i)
    unlike += got.outcomes[i].tokens != want.outcomes[i].tokens ||
                      got.outcomes[i].finished.reason != want.outcomes[i].finished.reason
                  ? 1
                  : 0;
  return unlike;
}

TEST_P(CudaMaskedSteps, ConstrainedRowsLaunchedAheadDrawWhatTheyDrawPlannedAfter) {
  if (model_->config().vocab_size <= engine::testing::kStop)
    GTEST_SKIP() << "the JSON vocabulary takes 512 ids; " << GetParam() << " has " << model_->config().vocab_size;
  using Lookahead = engine::EngineOptions::Lookahead;
  for (const char* graphs : {"1", "0"}) {
    SCOPED_TRACE(std::string("graphs ") + graphs);
    auto model = load_with_env(GetParam(), "DUET_CUDA_GRAPHS", graphs);
    ASSERT_TRUE(model->masks_later()) << "the CUDA backend should hold masks";
    const std::vector<engine::Request> requests = constrained_ahead_requests(*model);
    EXPECT_TRUE(requests[1].grammar_after.has_value() && requests[3].grammar_after.has_value())
        << "a free run ended before its grammar_after's place";
    const AheadOutcome planned_after = run_constrained_ahead(*model, requests, Lookahead::never, false);
    const AheadOutcome ahead = run_constrained_ahead(*model, requests, Lookahead::always, false);
    EXPECT_EQ(planned_after.steps_ahead, 0);
    EXPECT_GT(ahead.steps_ahead, 10) << "steps with constrained rows should have gone ahead";
    EXPECT_EQ(unlike_outcomes(ahead, planned_after), 0);
    int constrained_tokens = 0;
    for (size_t i = 0; i < 4; ++i) constrained_tokens += static_cast<int>(planned_after.outcomes[i].tokens.size());
    EXPECT_GT(constrained_tokens, 12) << "the constrained requests drew too little to show anything";
    if (std::string(graphs) == "1")
      EXPECT_GT(unlike_outcomes(run_constrained_ahead(*model, requests, Lookahead::always, true), planned_after), 0)
          << "control: masks written a token early went unnoticed";
  }
}

// Model::launch_holding_masks on the CUDA backend: the masked sampler waits for release_masks, whose writer runs then
// and only then (tests/engine/held_masks.h's checks, as on the CPU).
TEST_P(CudaMaskedSteps, HeldMasksAreWrittenAtReleaseAndNeverWhenDropped) {
  std::vector<int32_t> prompt_a, prompt_b;
  for (int32_t t = 0; t < 20; ++t) prompt_a.push_back((29 * t + 5) % 500);
  for (int32_t t = 0; t < 9; ++t) prompt_b.push_back((41 * t + 17) % 500);
  engine::testing::expect_held_masks_kept(*model_, prompt_a, prompt_b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMaskedSteps, ::testing::Values("tiny-mm", "tiny-text"));

}  // namespace
}  // namespace duet::model
