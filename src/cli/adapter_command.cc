// `duet adapter --merged M --base B --out DIR`: writes the runtime adapter folder that serves M's decisions from B
// (convert/adapter_extraction.h), printing each module's fit as it goes and a summary at the end.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "convert/adapter_extraction.h"

namespace duet::cli {

namespace {

void print_summary(const convert::ExtractionReport& report) {
  double worst = 0;
  std::string worst_key;
  for (const auto& m : report.modules) {
    const double ratio = m.floor > 0 ? m.residual / m.floor : 0;
    if (ratio >= worst) worst = ratio, worst_key = m.key;
  }
  std::printf(
      "duet adapter: %zu modules factored, %zu tensors differ only by BF16 rounding (not adapted), %lld equal; "
      "worst residual %.3fx the BF16 floor (%s); %.1f s\n",
      report.modules.size(), report.rounding_only.size(), static_cast<long long>(report.equal_tensors), worst,
      worst_key.c_str(), report.seconds);
}

}  // namespace

void add_adapter_command(CLI::App& app) {
  auto options = std::make_shared<convert::ExtractionOptions>();
  auto svd = std::make_shared<std::string>("auto");
  auto* cmd = app.add_subcommand("adapter", "Write a runtime adapter folder: a merged checkpoint as base + LoRA");
  cmd->add_option("--merged", options->merged_dir, "The merged checkpoint folder (with its joint head)")->required();
  cmd->add_option("--base", options->base_dir, "The base checkpoint folder it was fine-tuned from")->required();
  cmd->add_option("--out", options->out_dir, "The adapter folder to write (new, or empty)")->required();
  cmd->add_option("--rank", options->rank, "Rank per projection (the full rank when a projection is smaller)")
      ->capture_default_str();
  cmd->add_option("--svd", *svd,
                  "auto (randomized range finder where the rank is below the full rank, else full), full, randomized")
      ->capture_default_str();
  cmd->add_flag(
      "--lm-head-rows", options->lm_head_rows,
      "Also write lm_head_rows.safetensors, so the server checks the served base's output embedding is this one");
  cmd->callback([options, svd] {
    options->svd = convert::svd_method_from(*svd);
    options->progress = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    print_summary(convert::extract_adapter(*options));
  });
}

}  // namespace duet::cli
