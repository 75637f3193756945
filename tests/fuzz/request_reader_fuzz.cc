// A libFuzzer target (fuzz_targets.h): the HTTP request reader on arbitrary bytes, fed in pieces whose size the first
// byte picks (as a socket delivers them), requests read one after another on the same bytes (pipelining). Every refusal
// must be an ApiError with a 4xx or 5xx status; anything else escaping, or a sanitizer report, is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "server/request_reader.h"

int duet::fuzz::request_reader(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  duet::server::HttpLimits limits;
  limits.max_header_bytes = 4096;
  limits.max_header_fields = 16;
  limits.max_body_bytes = 8192;
  for (int request = 0; request < 4 && !bytes.empty(); ++request) {
    duet::server::RequestReader reader(limits);
    std::string pending;
    size_t at = 0;
    try {
      while (reader.state() != duet::server::RequestReader::State::complete && at < bytes.size()) {
        pending.append(bytes.substr(at, step));
        at = std::min(bytes.size(), at + step);
        pending.erase(0, reader.feed(pending));
        if (reader.state() == duet::server::RequestReader::State::header_done) {
          (void)reader.head().path;
          reader.read_body();
          pending.erase(0, reader.feed(pending));
        }
      }
      if (reader.state() != duet::server::RequestReader::State::complete) return 0;
      (void)reader.take_request();
    } catch (const duet::server::ApiError& error) {
      if (error.status() < 400 || error.status() > 599) std::abort();
      return 0;
    }
    bytes = bytes.substr(at - pending.size());
  }
  return 0;
}
