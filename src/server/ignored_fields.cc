#include "server/ignored_fields.h"

#include <fmt/format.h>

#include "base/log.h"

namespace duet::server {
namespace {

std::string escaped(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (c > 0x20 && c < 0x7f && c != ',' && c != '%')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

void IgnoredFields::add(std::string path) {
  ++count_;
  if (paths_.size() >= kMaxNamed) return;
  if (path.size() > kMaxNameBytes) path = path.substr(0, kMaxNameBytes) + "...";
  paths_.push_back(std::move(path));
}

std::string IgnoredFields::list() const {
  std::string out;
  for (const auto& path : paths_) out += (out.empty() ? "" : ", ") + escaped(path);
  if (count_ > paths_.size()) out += fmt::format(", ... ({} more)", count_ - paths_.size());
  return out;
}

HttpHeaders report_ignored_fields(const IgnoredFields& ignored, std::string_view route) {
  if (ignored.empty()) return {};
  const std::string list = ignored.list();
  log_warn("{}: ignored {} unknown field{}: {}", route, ignored.count(), ignored.count() == 1 ? "" : "s", list);
  return {{std::string(kIgnoredFieldsHeader), list}};
}

}  // namespace duet::server
