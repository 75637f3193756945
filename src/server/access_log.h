#pragma once
// One line per answered request (the access log): route, status, tokens (prompt, completion, cached), time to
// first token (a decision: its prefill and head times), total time, client address, and who the client says is asking
// (user, safety_identifier). As text (key=value) or as one JSON object a line (--log-format json), on stderr with the
// rest of the log.
#include <optional>
#include <string>

namespace duet::server {

struct AccessRecord {
  std::string method;
  std::string route;   // the route's path ("unmatched" when none)
  std::string client;  // address:port of the peer
  int status = 0;      // 0: the connection closed before an answer was sent
  std::optional<int> prompt_tokens, completion_tokens, cached_tokens;
  std::optional<double> time_to_first_token_s;
  std::optional<double> prefill_s, head_s;  // a decision's: submission to its last prompt chunk, then to its answer
  double total_s = 0;
  std::string user, safety_identifier;
};

std::string access_line(const AccessRecord& record, bool json);
void write_access_line(const AccessRecord& record, bool json);

}  // namespace duet::server
