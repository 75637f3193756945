#pragma once
// Helpers of the GPU tests that compare decode steps replayed as CUDA graphs with the same steps launched one by one
// (model_cuda_test, masked_steps_test): the eager reference, sequences prefilled from slices of one prompt, and the
// comparison of whole sequences.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../model/golden_fixtures.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::testing {

// The fixture on a CUDA backend loaded with `name`=`value` in its environment (the backend reads its switches when it
// is made).
inline std::unique_ptr<model::Model> load_with_env(const std::string& fixture, const char* name, const char* value) {
  setenv(name, value, 1);
  auto model = model::Model::load(model_fixture(fixture), "cuda");
  unsetenv(name);
  return model;
}

// The same fixture on a CUDA backend that launches every step (DUET_CUDA_GRAPHS=0), the graph tests' reference.
inline std::unique_ptr<model::Model> load_without_graphs(const std::string& fixture) {
  return load_with_env(fixture, "DUET_CUDA_GRAPHS", "0");
}

inline void expect_same_sequences(const std::vector<std::vector<int32_t>>& graphed,
                                  const std::vector<std::vector<int32_t>>& eager) {
  ASSERT_EQ(graphed.size(), eager.size());
  int differing = 0;
  for (size_t i = 0; i < graphed.size(); ++i) differing += graphed[i] != eager[i] ? 1 : 0;
  EXPECT_EQ(differing, 0) << differing << " of " << graphed.size() << " sequences differ between graphs on and off";
}

// Opens `count` sequences and prefills sequence i with source[i * shift, i * shift + length + i * growth): prompts that
// overlap but differ in start and length.
struct PrefilledSlices {
  std::vector<int32_t> slots;
  std::vector<std::vector<int32_t>> prompts;
};
inline PrefilledSlices prefill_slices(engine::PieceRunner& runner, const std::vector<int32_t>& source, int count,
                                      size_t shift, size_t length, size_t growth) {
  PrefilledSlices out;
  std::vector<model::Piece> prefill;
  for (int i = 0; i < count; ++i) {
    const size_t start = static_cast<size_t>(i) * shift, size = length + static_cast<size_t>(i) * growth;
    out.prompts.emplace_back(source.begin() + static_cast<std::ptrdiff_t>(start),
                             source.begin() + static_cast<std::ptrdiff_t>(start + size));
    out.slots.push_back(runner.open());
  }
  for (int i = 0; i < count; ++i)
    prefill.push_back({.slot = out.slots[i], .tokens = out.prompts[i], .wants = model::RowOutput::last_logits});
  runner.run(prefill);
  return out;
}

}  // namespace duet::testing
