// The draft policy (engine/draft_policy.h) on simulated costs: a step's forward costs a fixed part plus a part per
// row, drafting a part per drafted token, and each draft is accepted with a set probability. At one stream, where rows
// are nearly free, it settles on the most drafts; at 64 streams, where every row costs, on none; with drafts that are
// never accepted, on none at any batch. The control: the same simulation with every draft accepted at 64 streams and
// rows nearly free chooses drafts again, so "none" above comes from the costs, not from the policy's defaults.
#include "engine/draft_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace duet::engine {
namespace {

struct Costs {
  double fixed = 10e-3;       // seconds of a step's forward whatever its rows (reading the weights)
  double per_row = 0.1e-3;    // seconds a row adds
  double per_draft = 0.2e-3;  // seconds of drafting one token for every sequence
  double acceptance = 0.8;
};

// Runs `steps` simulated steps of `sequences` streams and counts the K chosen over the last half.
std::map<int32_t, int> simulate(const Costs& costs, int32_t sequences, int steps = 600) {
  DraftPolicy policy(4);
  std::mt19937 random(7);
  std::bernoulli_distribution accept(costs.acceptance);
  std::map<int32_t, int> chosen;
  int32_t k = 0;  // what the step verifies: the last choice
  for (int step = 0; step < steps; ++step) {
    policy.note_forward(sequences, k, costs.fixed + costs.per_row * sequences * (k + 1));
    for (int32_t s = 0; s < sequences && k > 0; ++s) {
      int32_t accepted = 0;
      while (accepted < k && accept(random)) ++accepted;
      policy.note_verified(accepted < k ? accepted + 1 : k, accepted);
    }
    k = policy.choose(sequences);
    if (k > 0) policy.note_drafting(sequences, k, costs.per_draft * k * (1 + sequences / 16.0));
    if (step >= steps / 2) ++chosen[k];
  }
  return chosen;
}

int32_t most_chosen(const std::map<int32_t, int>& chosen) {
  return std::max_element(chosen.begin(), chosen.end(), [](auto a, auto b) { return a.second < b.second; })->first;
}

TEST(DraftPolicy, OneStreamDraftsTheMost) {
  const auto chosen = simulate(Costs{}, 1);
  EXPECT_EQ(most_chosen(chosen), 4);
  EXPECT_GE(chosen.at(4), 250) << "explorations aside, the best K every step";
}

TEST(DraftPolicy, SixtyFourStreamsDraftNone) {
  Costs costs;
  costs.per_row = 0.5e-3;  // 64 rows already cost three times the fixed part
  EXPECT_EQ(most_chosen(simulate(costs, 64)), 0);
}

TEST(DraftPolicy, DraftsNeverAcceptedAreNotDrafted) {
  Costs costs;
  costs.acceptance = 0;
  EXPECT_EQ(most_chosen(simulate(costs, 1)), 0);
}

TEST(DraftPolicy, TheControlDraftsWhenRowsAreFreeAtAnyBatch) {
  Costs costs;
  costs.per_row = 0.001e-3;
  costs.per_draft = 0.001e-3;
  costs.acceptance = 1;
  EXPECT_EQ(most_chosen(simulate(costs, 64)), 4);
}

TEST(DraftPolicy, AcceptanceIsPerPositionGivenTheOnesBefore) {
  DraftPolicy policy(3);
  for (int i = 0; i < 100; ++i) policy.note_verified(3, 1);  // the first accepted, the second rejected, every time
  EXPECT_NEAR(policy.acceptance(1), 1.0, 1e-12);
  EXPECT_NEAR(policy.acceptance(2), 0.0, 1e-12);
  EXPECT_NEAR(policy.expected_tokens(3), 2.0, 1e-12);
  EXPECT_THROW(DraftPolicy(5), std::exception);
}

}  // namespace
}  // namespace duet::engine
