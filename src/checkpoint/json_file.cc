#include "checkpoint/json_file.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace duet::checkpoint {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

}  // namespace duet::checkpoint
