#include "checkpoint/adapter_format.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/sha256.h"
#include "checkpoint/json_file.h"

namespace duet::checkpoint::adapter_format {

namespace fs = std::filesystem;

std::string module_key(long layer, std::string_view module) { return fmt::format("layers.{}.{}", layer, module); }

namespace {
std::string file_sha256(const fs::path& path) {
  if (fs::file_size(path) == 0) return sha256_hex(std::string_view());
  const MappedFile file(path.string());
  return sha256_hex(file.bytes());
}
}  // namespace

std::vector<std::string_view> signed_files(bool with_lm_head_rows) {
  std::vector<std::string_view> files = {kFactorsFile, kHeadWeightsFile, kHeadConfigFile, kManifestFile};
  if (with_lm_head_rows) files.push_back(kLmHeadRowsFile);
  return files;
}

std::map<std::string, std::string> checksums_of(const std::string& folder, std::span<const std::string_view> files) {
  std::map<std::string, std::string> sums;
  for (std::string_view name : files) sums[std::string(name)] = file_sha256(fs::path(folder) / name);
  return sums;
}

void sign_folder(const std::string& folder) {
  const fs::path path = fs::path(folder) / kChecksumsFile;
  const auto sums = checksums_of(folder, signed_files(fs::exists(fs::path(folder) / kLmHeadRowsFile)));
  std::ofstream out(path);
  out << nlohmann::ordered_json(sums).dump(2) << "\n";
  if (!out) fail("{}: cannot write", path.string());
}

void verify_checksums(const std::string& folder, std::span<const std::string_view> required) {
  const fs::path path = fs::path(folder) / kChecksumsFile;
  if (!fs::exists(path)) fail("{}: missing; every adapter folder lists its files' sha256 there", path.string());
  const nlohmann::json sums = read_json_file(path.string());
  if (!sums.is_object()) fail("{}: expected an object of file name -> sha256", path.string());
  for (std::string_view name : required)
    if (!sums.contains(std::string(name))) fail("{}: does not list {}", path.string(), name);
  for (const auto& [name, sum] : sums.items()) {
    const fs::path file = fs::path(folder) / name;
    if (!sum.is_string()) fail("{}: {}: the sum is not a string", path.string(), name);
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      fail("{}: {}: not a file name in the folder", path.string(), name);
    if (!fs::is_regular_file(file)) fail("{}: missing (listed in {})", file.string(), kChecksumsFile);
    const std::string actual = file_sha256(file);
    if (actual != sum.get<std::string>())
      fail("{}: sha256 {} does not match {} in {}: the file is damaged or was changed", file.string(), actual,
           sum.get<std::string>(), kChecksumsFile);
  }
}

}  // namespace duet::checkpoint::adapter_format
