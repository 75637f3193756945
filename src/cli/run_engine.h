#pragma once
// `duet run --draft KIND`: the continuation through the engine (as a server decodes, without HTTP), with the figures
// of speculative decoding on stderr: acceptance per draft position, tokens per verify step, decode tok/s. KIND oracle
// (benchmarks): the drafts are the continuation a plain run made first, each draft wrong with probability
// 1 - oracle_acceptance, so the figures are those a drafter of that acceptance would give. KIND none: the engine's
// plain path (steps launched ahead included: duet_engine_steps_ahead_total's count is printed).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"

namespace duet::cli {

struct EngineRun {
  std::span<const int32_t> prompt;
  int32_t max_tokens = 16;
  int32_t streams = 1;
  bool ignore_eos = false;
  float temperature = 0.0f;  // 0: greedy; otherwise seeded sampling (seed 1 + stream)
  engine::DraftOptions draft;
  double oracle_acceptance = 1.0;  // with DraftKind::oracle
  // Untimed runs of the same requests before the timed one, on engines of their own (the graphs' captures and the
  // GEMMs' first calls paid, as a warm server has): figures comparable with `duet run`'s plain passes. The oracle's
  // baseline run warms it anyway.
  int32_t warmup = 0;
};

// Every stream's ids (all streams send the same prompt); prints the figures.
std::vector<std::vector<int32_t>> run_through_engine(model::Model& model, const EngineRun& run);

}  // namespace duet::cli
