#pragma once
// Reads a JSON file (config.json, index files) with errors that name the file.
#include <nlohmann/json.hpp>
#include <string>

namespace duet::checkpoint {

nlohmann::json read_json_file(const std::string& path);

}  // namespace duet::checkpoint
