#include "server/wire_format.h"

#include <fmt/format.h>

#include <boost/beast/http/status.hpp>

namespace duet::server {
namespace {

// A header value never carries a line break: nothing a route puts there can start a header or a response of its own.
std::string single_line(std::string_view value) {
  std::string out(value);
  for (char& c : out)
    if (c == '\r' || c == '\n') c = ' ';
  return out;
}

std::string head(const HttpResponse& res, const Framing& framing, std::string_view length_header) {
  std::string_view reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(res.status));
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{}", res.status, reason,
                                single_line(res.content_type), length_header);
  for (const auto& [name, value] : res.headers) out += single_line(name) + ": " + single_line(value) + "\r\n";
  for (const auto& [name, value] : framing.extra_headers) out += single_line(name) + ": " + single_line(value) + "\r\n";
  out += framing.keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

}  // namespace

std::string whole_response(const HttpResponse& res, const Framing& framing) {
  std::string out = head(res, framing, fmt::format("Content-Length: {}\r\n", res.body.size()));
  if (!framing.head_only) out += res.body;
  return out;
}

std::string stream_head(const HttpResponse& res, const Framing& framing) {
  return head(res, framing, framing.http_1_0 ? "" : "Transfer-Encoding: chunked\r\n");
}

std::string stream_piece(std::string_view data, const Framing& framing) {
  if (data.empty()) return {};  // an empty chunk would end the stream
  if (framing.http_1_0) return std::string(data);
  return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
}

std::string stream_end(const Framing& framing) { return framing.http_1_0 ? "" : "0\r\n\r\n"; }

}  // namespace duet::server
