// `duet convert-norms SRC OUT`: a copy of SRC with its F32 GDN norms in BF16 (convert/norm_conversion.h).
#include <cstdio>

#include "cli/commands.h"
#include "convert/norm_conversion.h"

namespace duet::cli {

void add_convert_norms_command(CLI::App& app) {
  auto src = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("convert-norms", "Copy a checkpoint with its F32 linear_attn.norm.weight in BF16");
  cmd->add_option("src", *src, "The checkpoint folder")->required();
  cmd->add_option("out", *out, "The new folder (must not exist)")->required();
  cmd->callback([src, out] {
    const auto report = convert::convert_norms(*src, *out, [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
    std::printf(
        "duet convert-norms: %zu norms to BF16; %zu files written, %zu hard-linked, %zu copied; total_size %lld\n",
        report.converted.size(), report.rewritten.size(), report.linked.size(), report.copied.size(),
        static_cast<long long>(report.total_size));
  });
}

}  // namespace duet::cli
