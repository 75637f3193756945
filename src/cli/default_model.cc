#include <filesystem>

#include "cli/commands.h"

namespace duet::cli {

// The demo model ships in the source tree; the build records where (DUET_SOURCE_DIR) so that `duet` finds it
// from any working directory. DUET_DEMO_MODEL overrides it.
std::string default_model_dir() {
  if (const char* env = std::getenv("DUET_DEMO_MODEL")) return env;
  return std::string(DUET_SOURCE_DIR) + "/models/demo";
}

}  // namespace duet::cli
