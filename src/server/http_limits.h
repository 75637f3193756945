#pragma once
// What the HTTP layer allows a client: sizes checked while a request is read, deadlines on reading and sending,
// and how many connections may be open. `duet serve` sets them from its flags (docs/api.md lists them).
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace duet::server {

struct HttpLimits {
  size_t max_header_bytes = 64u << 10;  // request line and every header line together (431 above)
  size_t max_header_fields = 256;       // header lines (431 above)
  size_t max_body_bytes = 8u << 20;     // after any chunked framing is taken off (413 above)
  // From the first byte of a request to the end of its header, and from there to the end of its body: totals, so
  // a client sending a byte at a time gains nothing (408 when passed).
  std::chrono::seconds header_timeout{10};
  std::chrono::seconds body_timeout{60};
  std::chrono::seconds idle_timeout{30};  // a kept-alive connection with no request in progress is closed after it
  // A response that the client accepts no byte of for this long is given up (its request cancelled).
  std::chrono::seconds send_timeout{30};
  // Bytes of one connection's response waiting for the client to take them: a stream past it is cut and its
  // request cancelled, so a client that stops reading holds no slot and no growing buffer.
  size_t max_unsent_bytes = 1u << 20;
  // Request bodies all connections may hold at once; a body past it is answered 503 with Retry-After (0: see
  // default_buffered_body_bytes in body_budget.h).
  size_t max_buffered_body_bytes = 0;
  // Open connections; at the limit the one idle the longest is closed for a new one, and when none is idle the new
  // one is answered 503 and closed (0: see effective_max_connections).
  int max_connections = 0;
  int max_connections_per_client = 0;       // from one address; more are answered 429 and closed (0: no limit)
  std::chrono::seconds shutdown_grace{30};  // after SIGTERM, how long running requests may take to finish
};

}  // namespace duet::server
