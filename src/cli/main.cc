// duet: an inference server for Qwen3.5-architecture models.
#include <cstdio>
#include <exception>

#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"duet: an inference server for Qwen3.5-architecture models"};
  app.require_subcommand(1);
  duet::cli::add_run_command(app);
  duet::cli::add_serve_command(app);
  duet::cli::add_bench_command(app);
  duet::cli::add_rows_command(app);
  duet::cli::add_adapter_command(app);
  duet::cli::add_convert_norms_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const duet::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
