#pragma once
// `--draft mtp|ngram --draft-tokens K` (speculative decoding, engine/draft_verify.h), shared by `duet serve` and
// `duet run`.
#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine.h"

namespace duet::cli {

struct DraftFlags {
  std::string kind = "none";
  int tokens = 3;
  bool fixed = false;              // always `tokens` drafts, instead of 0..tokens chosen per step from measured costs
  double oracle_acceptance = 1.0;  // `duet run --draft oracle` (benchmarks)
};

// `with_oracle`: also the benchmarks' oracle drafter (`duet run`; cli/run_engine.h).
void add_draft_flags(CLI::App& cmd, DraftFlags& flags, bool with_oracle = false);
// The engine's options from the flags; refuses (duet::Error, before the model loads) K outside 1..4.
engine::DraftOptions draft_options(const DraftFlags& flags);

}  // namespace duet::cli
