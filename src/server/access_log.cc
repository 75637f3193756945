#include "server/access_log.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/errors.h"

namespace duet::server {

std::string access_line(const AccessRecord& r, bool json) {
  nlohmann::ordered_json line = {
      {"method", r.method}, {"route", r.route}, {"status", r.status}, {"client", r.client}, {"total_s", r.total_s}};
  if (r.prompt_tokens) line["prompt_tokens"] = *r.prompt_tokens;
  if (r.completion_tokens) line["completion_tokens"] = *r.completion_tokens;
  if (r.cached_tokens) line["cached_tokens"] = *r.cached_tokens;
  if (r.time_to_first_token_s) line["ttft_s"] = *r.time_to_first_token_s;
  if (r.prefill_s) line["prefill_s"] = *r.prefill_s;
  if (r.head_s) line["head_s"] = *r.head_s;
  if (!r.user.empty()) line["user"] = r.user;
  if (!r.safety_identifier.empty()) line["safety_identifier"] = r.safety_identifier;
  if (json) return json_text(line);
  // Text: key=value, values written as JSON so a space or quote in a client's user id cannot forge a field.
  std::string out = "access";
  for (auto it = line.begin(); it != line.end(); ++it) {
    out += fmt::format(" {}=", it.key());
    out += it->is_string()         ? json_text(*it)
           : it->is_number_float() ? fmt::format("{:.4f}", it->get<double>())
                                   : it->dump();
  }
  return out;
}

void write_access_line(const AccessRecord& record, bool json) {
  if (!json) {
    log_info("{}", access_line(record, false));
    return;
  }
  const std::string line = access_line(record, true) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write a line, so lines of concurrent requests never mix
}

}  // namespace duet::server
