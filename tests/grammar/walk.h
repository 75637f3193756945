#pragma once
// A random walk through a grammar over a real vocabulary: at each step the mask is made, checked token by token
// against Matcher::allows (the slow path, one token at a time), and one allowed token is drawn. A sampler that
// "never wants the schema" is the hardest case for a grammar: every allowed token must be safe to take.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace duet::testing {

// Ids where the mask and the one-token check disagree (empty: the mask is exact).
inline std::vector<int32_t> mask_mismatches(grammar::Matcher& m, const std::vector<uint32_t>& mask) {
  std::vector<int32_t> wrong;
  const auto& v = m.compiled().vocabulary();
  for (int32_t id = 0; id < v.width(); ++id)
    if (grammar::test_bit(mask, id) != m.allows(id)) wrong.push_back(id);
  return wrong;
}

struct WalkResult {
  std::string document;
  bool finished = false;  // ended where the grammar may end (not cut by the step limit)
  int32_t steps = 0;
  int32_t mask_errors = 0;
};

// check_every: compare the mask with the slow check on every n-th step (0: never).
inline WalkResult random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& compiled, uint32_t seed,
                              int32_t max_steps, int32_t check_every) {
  grammar::Matcher m(compiled);
  const auto& v = compiled->vocabulary();
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(v.words()));
  WalkResult out;
  for (; out.steps < max_steps; ++out.steps) {
    if (m.can_end() && (m.must_end() || rng() % 4 == 0)) {
      out.finished = true;
      break;
    }
    m.fill_mask(mask);
    if (check_every > 0 && out.steps % check_every == 0) {
      const auto wrong = mask_mismatches(m, mask);
      out.mask_errors += static_cast<int32_t>(wrong.size());
      if (!wrong.empty())
        ADD_FAILURE() << "mask differs from the one-token check on " << wrong.size() << " ids, first " << wrong[0]
                      << " after \"" << out.document << "\"";
    }
    std::vector<int32_t> allowed, closing;
    for (int32_t id = 0; id < v.width(); ++id) {
      if (!grammar::test_bit(mask, id)) continue;
      allowed.push_back(id);
      const std::string& b = v.bytes(v.rank_of(id));
      if (b.find_first_of("\"]}") != std::string::npos) closing.push_back(id);
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after \"" << out.document << "\" and the document cannot end";
      break;
    }
    // Half the draws among tokens that close something, so documents end within the step budget.
    const auto& pool = !closing.empty() && rng() % 2 == 0 ? closing : allowed;
    const int32_t id = pool[rng() % pool.size()];
    out.document += v.bytes(v.rank_of(id));
    if (!m.accept_token(id)) {
      ADD_FAILURE() << "a token the mask allowed was refused: " << id;
      break;
    }
  }
  if (!out.finished && m.can_end() && m.must_end()) out.finished = true;
  return out;
}

}  // namespace duet::testing
