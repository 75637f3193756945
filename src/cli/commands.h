#pragma once
// Each `duet` subcommand lives in its own file and registers itself on the app here.
#include <CLI/CLI.hpp>

namespace duet::cli {

// Each adds a subcommand whose callback runs it; errors escape as duet::Error and main prints them.
void add_run_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_rows_command(CLI::App& app);
void add_adapter_command(CLI::App& app);
void add_convert_norms_command(CLI::App& app);

// The folder of the bundled demo model, used when no model is named.
std::string default_model_dir();

}  // namespace duet::cli
