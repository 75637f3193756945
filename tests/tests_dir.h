#pragma once
// Where this checkout's tests/ folder is, for every test that reads a fixture, a script or the demo model.
// The build compiles in its own source path (DUET_TESTS_DIR); a pack unpacked elsewhere (the GPU machine, another
// checkout) sets DUET_TESTS_DIR_OVERRIDE at run time, and that wins. Read on every call, not cached, so a test can
// check both ways.
#include <cstdlib>
#include <string>

namespace duet::testing {

inline std::string tests_dir() {
  if (const char* dir = std::getenv("DUET_TESTS_DIR_OVERRIDE"); dir != nullptr && *dir != '\0') return dir;
  return DUET_TESTS_DIR;
}

// The bundled demo model (models/demo beside tests/).
inline std::string demo_model_dir() { return tests_dir() + "/../models/demo"; }

}  // namespace duet::testing
