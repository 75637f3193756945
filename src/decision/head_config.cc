#include "decision/head_config.h"

#include <initializer_list>
#include <utility>

#include "base/error.h"
#include "checkpoint/json_file.h"

namespace duet::decision {

JointHeadConfig JointHeadConfig::load(const std::string& path) {
  const nlohmann::json json = checkpoint::read_json_file(path);
  if (!json.is_object()) fail("{}: expected a JSON object", path);
  JointHeadConfig config;
  const std::initializer_list<std::pair<const char*, int64_t*>> keys = {
      {"hidden_size", &config.hidden_size}, {"width", &config.width}, {"routing_layers", &config.routing_layers},
      {"layers", &config.layers},           {"heads", &config.heads}, {"feedforward", &config.feedforward}};
  // A key we do not know may change the head's math: refused rather than ignored.
  for (const auto& [key, value] : json.items()) {
    bool known = false;
    for (const auto& [name, field] : keys) known = known || key == name;
    if (!known)
      fail("{}: unknown key `{}` (duet knows {})", path, key,
           "hidden_size, width, routing_layers, layers, heads, feedforward");
  }
  for (const auto& [name, field] : keys) {
    if (!json.contains(name)) fail("{}: `{}` is missing", path, name);
    const nlohmann::json& value = json.at(name);
    if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > (1 << 20))
      fail("{}: `{}` must be a positive integer, got {}", path, name, value.dump());
    *field = value.get<int64_t>();
  }
  if (config.width % config.heads != 0)
    fail("{}: width {} is not divisible by heads {}", path, config.width, config.heads);
  return config;
}

}  // namespace duet::decision
