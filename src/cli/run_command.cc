#include "base/error.h"
#include "cli/commands.h"

namespace duet::cli {

// Placeholder until the forward pass lands: refuses by name instead of pretending to run.
void add_run_command(CLI::App& app) {
  auto* run = app.add_subcommand("run", "Greedy continuation of a prompt (token ids) on a model");
  run->callback([] { fail("duet run: the forward pass is not built yet"); });
}

}  // namespace duet::cli
