#pragma once
// Steps launched ahead (issue 16 item 5; Model::launch, Backend::sample_ahead, StepPlan::carried), checked the same way
// on every backend: step N + 1 is launched before step N is collected, each of its rows reading its token from N's
// draw where it was made. Four sequences decode sixteen steps that way (greedy with top logprobs, seeded, seeded with
// top-k, and greedy with penalties, whose carried token the backend adds to its slot's counts: CarriedId::
// counts_slot), against four more with the same prompts decoding step after step with the ids, and the penalized row's
// counts, sent from the host: the same tokens, logprobs and top logprobs. The controls: a run whose carried rows name
// their neighbour's draw gives other tokens, and so does the penalized row of a run that never sends its generated
// tokens to the counts (so a backend that did not count carried tokens would show).
#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <span>
#include <vector>

#include "engine/counts_sync.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::testing {

// Every draw of the four sequences: [step 0 (the prompts' draws) .. kSteps][row]. `ahead`: each step launched before
// the last is collected; `shift`: carried rows name the draw `shift` rows on (the first control); `counted` false: the
// penalized row's generated tokens never reach its counts (the second).
inline std::vector<std::vector<backend::SampledRow>> decode_launched_ahead(model::Model& model,
                                                                           std::span<const int32_t> prompt, bool ahead,
                                                                           int shift, bool counted) {
  constexpr int kRows = 4, kSteps = 16, kPenalized = 3;
  std::vector<backend::SampleSpec> settings(kRows);
  settings[0].temperature = 0.0f;
  settings[0].top_logprobs = 3;
  settings[1].temperature = 0.9f;
  settings[1].seed = 11;
  settings[2].temperature = 0.7f;
  settings[2].top_k = 20;
  settings[2].seed = 12;
  settings[kPenalized].temperature = 0.0f;
  settings[kPenalized].repetition_penalty = 1.3f;
  settings[kPenalized].presence_penalty = 8.0f;
  settings[kPenalized].frequency_penalty = 2.0f;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  engine::PieceRunner runner(model, kRows, 200);
  runner.storage().prepare_counts(vocab);
  engine::CountsSync counts(kRows, vocab);  // the penalized slot's counts, as the engine keeps them
  std::vector<int32_t> slots, next, generated;
  std::vector<model::Piece> prefill;
  std::vector<backend::SampleSpec> first(settings);
  for (int i = 0; i < kRows; ++i) slots.push_back(runner.open());
  const auto prompt_of = [&](int i) { return prompt.first(static_cast<size_t>(50 + 10 * i)); };
  const auto send_counts = [&] {
    std::vector<backend::CountsUpdate> updates;
    counts.sync(slots[kPenalized], 1, prompt_of(kPenalized), generated, updates);
    runner.storage().update_counts(updates);
  };
  send_counts();
  for (int i = 0; i < kRows; ++i) {
    first[i].position = 50 + 10 * i;
    if (i == kPenalized) first[i].counts_slot = slots[i];
    prefill.push_back(
        {.slot = slots[i], .tokens = prompt_of(i), .wants = model::RowOutput::sampled, .sample = &first[i]});
  }
  std::vector<std::vector<backend::SampledRow>> draws(kSteps + 1);
  for (const model::PieceResult& r : runner.run(prefill)) {
    next.push_back(r.sampled.id);
    draws[0].push_back(r.sampled);
  }
  generated.push_back(next[kPenalized]);
  std::vector<std::vector<backend::SampleSpec>> specs(kSteps, settings);
  std::vector<int32_t> placeholder(kRows, 0);
  std::unique_ptr<model::Model::Launched> out;
  for (int step = 0; step < kSteps; ++step) {
    const bool carried = ahead && step > 0;
    if (!carried && counted) send_counts();  // carried: the backend adds the token the host has not read
    std::vector<model::Piece> pieces;
    for (int i = 0; i < kRows; ++i) {
      specs[step][i].position = 51 + 10 * i + step;
      if (i == kPenalized) specs[step][i].counts_slot = slots[i];
      pieces.push_back({.slot = slots[i],
                        .tokens = carried ? std::span<const int32_t>(&placeholder[i], 1) : std::span(&next[i], 1),
                        .wants = model::RowOutput::sampled,
                        .role = backend::RowRole::decode,
                        .sample = &specs[step][i],
                        .carried_from = carried ? (i + shift) % kRows : -1});
    }
    std::unique_ptr<model::Model::Launched> launched = runner.launch(pieces);
    if (out != nullptr) {
      for (const model::PieceResult& r : runner.collect(std::move(out))) draws[step].push_back(r.sampled);
    }
    out = std::move(launched);
    if (!ahead) {
      const std::vector<model::PieceResult> results = runner.collect(std::move(out));
      for (int i = 0; i < kRows; ++i) next[i] = results[i].sampled.id;
      generated.push_back(next[kPenalized]);
      for (const model::PieceResult& r : results) draws[step + 1].push_back(r.sampled);
    }
  }
  if (out != nullptr)
    for (const model::PieceResult& r : runner.collect(std::move(out))) draws[kSteps].push_back(r.sampled);
  return draws;
}

// The checks above: launched ahead equals step by step, bit for bit; both controls differ.
inline void expect_launched_ahead_equals_step_by_step(model::Model& model, std::span<const int32_t> prompt) {
  constexpr size_t kPenalized = 3;
  const auto step_by_step = decode_launched_ahead(model, prompt, false, 0, true);
  const auto ahead = decode_launched_ahead(model, prompt, true, 0, true);
  const auto wrong = decode_launched_ahead(model, prompt, true, 1, true);
  const auto uncounted = decode_launched_ahead(model, prompt, false, 0, false);
  ASSERT_EQ(ahead.size(), step_by_step.size());
  for (size_t step = 0; step < ahead.size(); ++step) {
    ASSERT_EQ(ahead[step].size(), step_by_step[step].size()) << "step " << step;
    for (size_t i = 0; i < ahead[step].size(); ++i) {
      const backend::SampledRow &got = ahead[step][i], &want = step_by_step[step][i];
      EXPECT_EQ(got.id, want.id) << "step " << step << " row " << i;
      EXPECT_EQ(std::bit_cast<uint32_t>(got.logprob), std::bit_cast<uint32_t>(want.logprob))
          << "step " << step << " row " << i;
      EXPECT_EQ(got.top, want.top) << "step " << step << " row " << i;
    }
  }
  size_t differ = 0, uncounted_differ = 0;
  for (size_t step = 0; step < wrong.size(); ++step) {
    for (size_t i = 0; i < wrong[step].size(); ++i) differ += wrong[step][i].id != step_by_step[step][i].id;
    uncounted_differ += uncounted[step][kPenalized].id != step_by_step[step][kPenalized].id;
  }
  EXPECT_GT(differ, 0u) << "rows that carried their neighbour's draw gave the same tokens";
  EXPECT_GT(uncounted_differ, 0u) << "the penalized row's tokens did not depend on its generated tokens' counts";
}

}  // namespace duet::testing
