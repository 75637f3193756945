#pragma once
// Settings read from the environment: a switch (DUET_STEP_GAPS=1, DUET_PROFILE=1, ...), on when set, not empty and not
// "0"; a list of names (DUET_CUDA_PDL_FLIP=a,b, ...), comma-separated, empty names dropped.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace duet {

inline bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

// "a,b,,c" -> {"a", "b", "c"}; unset: none.
inline std::vector<std::string> env_list(const char* name) {
  std::vector<std::string> names;
  const char* value = std::getenv(name);
  if (value == nullptr) return names;
  const std::string text = value;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) names.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return names;
}

}  // namespace duet
