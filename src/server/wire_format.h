#pragma once
// The bytes of answers on the wire (HTTP/1.1): a whole response, the head of a stream, its chunks and its end.
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace duet::server {

// How a response is framed for the request it answers.
struct Framing {
  bool keep_alive = true;     // false: `Connection: close`, and the connection closes after it
  bool head_only = false;     // a HEAD request: the header (with the body's Content-Length) and no body
  bool http_1_0 = false;      // a stream to an HTTP/1.0 client is sent unchunked and ended by closing
  HttpHeaders extra_headers;  // what every answer to this request carries besides its own (CORS)
};

std::string whole_response(const HttpResponse& res, const Framing& framing);
// A stream's header: chunked (or, for HTTP/1.0, until the connection closes).
std::string stream_head(const HttpResponse& res, const Framing& framing);
// One piece of a stream's body, and its end (empty for HTTP/1.0, which ends by closing).
std::string stream_piece(std::string_view data, const Framing& framing);
std::string stream_end(const Framing& framing);

// The interim answer to `Expect: 100-continue` once the header has been accepted.
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace duet::server
