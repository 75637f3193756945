#pragma once
// Model::launch_holding_masks at the model (the engine's structured-output rows launched ahead): one step of two
// decode rows, one masked by a writer, launched three ways on twin runners from the same prompts: plainly (the
// reference), holding its masks and released, holding and collected unreleased (a step dropped). Shared by the CPU
// tests (constrained_steps_test.cc) and the GPU's (tests/cuda/masked_steps_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::engine::testing {

struct HeldMasks {
  int writes_at_launch = 0;                       // the writer's calls before release (none are due)
  int writes_at_release = 0;                      // at release (one is due)
  int writes_dropped = 0;                         // over the dropped step's whole life (none are due)
  std::vector<int32_t> plain, released, dropped;  // each way's two draws
  bool inside = false;                            // the released masked draw is inside its mask
};

struct CountingWriter final : backend::MaskWriter {
  explicit CountingWriter(const std::vector<uint32_t>& m) : mask(m) {}
  size_t words() const override { return mask.size(); }
  void write(std::span<uint32_t> words) override {
    ++calls;
    std::copy(mask.begin(), mask.end(), words.begin());
  }
  const std::vector<uint32_t>& mask;
  int calls = 0;
};

// `mask`: the masked row's allowed ids (vocabulary words), chosen by the caller to exclude the row's free draw.
inline HeldMasks check_held_masks(model::Model& model, std::span<const int32_t> prompt_a,
                                  std::span<const int32_t> prompt_b, const std::vector<uint32_t>& mask) {
  HeldMasks out;
  enum class Way { plain, released, dropped };
  for (const Way way : {Way::plain, Way::released, Way::dropped}) {
    PieceRunner runner(model, 2, 256);
    const int32_t a = runner.open(), b = runner.open();
    runner.run(std::vector<model::Piece>{{.slot = a, .tokens = prompt_a, .wants = model::RowOutput::none},
                                         {.slot = b, .tokens = prompt_b, .wants = model::RowOutput::none}});
    CountingWriter writer(mask);
    backend::SampleSpec spec_a, spec_b;
    spec_a.temperature = 0.9f, spec_a.seed = 7, spec_a.position = static_cast<int64_t>(prompt_a.size());
    spec_b.temperature = 0.9f, spec_b.seed = 8, spec_b.position = static_cast<int64_t>(prompt_b.size());
    if (way == Way::plain) {
      spec_a.allowed = mask;
    } else {
      spec_a.mask_writer = &writer;
    }
    const int32_t next[] = {3, 4};
    const std::vector<model::Piece> pieces = {{.slot = a,
                                               .tokens = std::span(&next[0], 1),
                                               .wants = model::RowOutput::sampled,
                                               .role = backend::RowRole::decode,
                                               .sample = &spec_a},
                                              {.slot = b,
                                               .tokens = std::span(&next[1], 1),
                                               .wants = model::RowOutput::sampled,
                                               .role = backend::RowRole::decode,
                                               .sample = &spec_b}};
    std::unique_ptr<model::Model::Launched> launched = runner.launch(pieces, way != Way::plain);
    if (way == Way::released) {
      out.writes_at_launch = writer.calls;
      model.release_masks(*launched);
      out.writes_at_release = writer.calls - out.writes_at_launch;
    }
    const std::vector<model::PieceResult> results = runner.collect(std::move(launched));
    std::vector<int32_t>& draws = way == Way::plain ? out.plain : way == Way::released ? out.released : out.dropped;
    for (const model::PieceResult& r : results) draws.push_back(r.sampled.id);
    if (way == Way::dropped) out.writes_dropped = writer.calls;
    if (way == Way::released) {
      const auto id = static_cast<size_t>(draws[0]);
      out.inside = id / 32 < mask.size() && ((mask[id / 32] >> (id % 32)) & 1u) != 0;
    }
  }
  return out;
}

// The checks both suites make: the writer is not called at launch and once at release, and the draws equal the
// same step's with the mask ready-made; a held step collected unreleased calls no writer and draws its masked row
// with every id allowed, its unmasked row as ever. The mask (a third of the ids) leaves out the row's free draw, so
// the checks see it.
inline void expect_held_masks_kept(model::Model& model, std::span<const int32_t> prompt_a,
                                   std::span<const int32_t> prompt_b) {
  const int64_t vocab = model.config().vocab_size;
  const auto words = static_cast<size_t>((vocab + 31) / 32);
  const HeldMasks free_run = check_held_masks(model, prompt_a, prompt_b, std::vector<uint32_t>(words, ~0u));
  const int32_t free_draw = free_run.plain.at(0);
  std::vector<uint32_t> mask(words, 0u);
  for (int64_t id = 0; id < vocab; ++id)
    if (id % 3 == (free_draw + 1) % 3) mask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  const HeldMasks held = check_held_masks(model, prompt_a, prompt_b, mask);
  EXPECT_EQ(held.writes_at_launch, 0) << "a held mask was written at launch";
  EXPECT_EQ(held.writes_at_release, 1);
  EXPECT_EQ(held.writes_dropped, 0) << "a dropped step's writer was called";
  EXPECT_EQ(held.released, held.plain) << "released masks drew other tokens than the same mask ready-made";
  EXPECT_TRUE(held.inside);
  EXPECT_NE(held.released.at(0), free_draw) << "control: the mask did not change the draw";
  EXPECT_EQ(held.dropped.at(0), free_draw) << "a dropped step's masked row is drawn with every id allowed";
  EXPECT_EQ(held.dropped.at(1), held.plain.at(1)) << "the unmasked row of a dropped step";
}

}  // namespace duet::engine::testing
