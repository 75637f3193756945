#include "cli/draft_flags.h"

#include "base/error.h"

namespace duet::cli {

void add_draft_flags(CLI::App& cmd, DraftFlags& flags, bool with_oracle) {
  cmd.add_option("--draft", flags.kind,
                 std::string("Speculative decoding: mtp (the checkpoint's MTP layer drafts), ngram (prompt lookup), ") +
                     (with_oracle ? "oracle (a plain run's continuation, each draft right with probability "
                                    "--oracle-acceptance: benchmarks), "
                                  : "") +
                     "or none. Tokens are the same either way; drafts verified in one step make fewer steps (CPU "
                     "backend only)")
      ->check(with_oracle ? CLI::IsMember({"none", "mtp", "ngram", "oracle"}) : CLI::IsMember({"none", "mtp", "ngram"}))
      ->capture_default_str();
  if (with_oracle)
    cmd.add_option("--oracle-acceptance", flags.oracle_acceptance,
                   "With --draft oracle: the probability that each draft is right")
        ->capture_default_str();
  cmd.add_option("--draft-tokens", flags.tokens,
                 "With --draft: the most tokens drafted and verified per step, 1 to 4; each step drafts 0 to this "
                 "many, whichever measured cost and acceptance make fastest (--draft-fixed: always this many)")
      ->capture_default_str();
  cmd.add_flag("--draft-fixed", flags.fixed, "With --draft: always draft --draft-tokens tokens a step");
}

engine::DraftOptions draft_options(const DraftFlags& flags) {
  engine::DraftOptions options;
  options.kind = flags.kind == "mtp"      ? engine::DraftKind::mtp
                 : flags.kind == "ngram"  ? engine::DraftKind::ngram
                 : flags.kind == "oracle" ? engine::DraftKind::oracle
                                          : engine::DraftKind::none;
  options.tokens = flags.tokens;
  options.measured = !flags.fixed;
  if (options.kind == engine::DraftKind::none) return options;
  if (flags.tokens < 1 || flags.tokens > 4) fail("--draft-tokens {}: must be 1 to 4", flags.tokens);
  return options;
}

}  // namespace duet::cli
