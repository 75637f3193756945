#pragma once
// Model::launch_holding_masks at the model (the engine's structured-output rows launched ahead): one step of two
// decode rows, one masked by a writer, launched three ways on twin runners from the same prompts: plainly (the
// reference), holding its masks and released, holding and collected unreleased (a step dropped). Shared by the CPU
// tests (constrained_steps_test.cc) and the GPU's (tests/cuda/masked_steps_test.cc); the callers assert.
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

}  // namespace duet::engine::testing
