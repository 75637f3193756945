#include "server/request_reader.h"

#include <fmt/format.h>

// Boost.Beast asserts `n >= 5` in parse_chunk_header on a malformed trailer (tests/fuzz/seeds/request_reader_fuzz/
// beast_chunk_header_assert, found by the fuzzer); compiled out, as in the Release build that ships (NDEBUG), that
// input reads nothing out of bounds under ASan. Off in every build, so that the sanitizer build, which fuzzes this file
// with assert() on for duet's own code, runs Beast as it ships. No other file includes Beast's parser.
#define BOOST_DISABLE_ASSERTS
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace duet::server {
namespace {

namespace http = boost::beast::http;

ApiError refusal(const boost::system::error_code& ec, const HttpLimits& limits) {
  if (ec == http::error::header_limit)
    return ApiError(
        431, fmt::format("the request header is larger than {} bytes (--max-header-bytes)", limits.max_header_bytes),
        "", "request_header_too_large");
  if (ec == http::error::body_limit)
    return ApiError(413,
                    fmt::format("the request body is larger than {} bytes (--max-body-bytes)", limits.max_body_bytes),
                    "", "request_too_large");
  if (ec == http::error::multiple_content_length)
    return ApiError(400, "the request has Content-Length headers that disagree", "", "invalid_content_length");
  if (ec == http::error::bad_content_length)
    return ApiError(400, "Content-Length is not a size, or comes with Transfer-Encoding: chunked", "",
                    "invalid_content_length");
  if (ec == http::error::bad_transfer_encoding)
    return ApiError(400, "Transfer-Encoding is repeated, or comes with Content-Length", "",
                    "invalid_transfer_encoding");
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension)
    return ApiError(400, "the chunked request body is malformed", "", "bad_request");
  return ApiError(400, fmt::format("the request could not be read: {}", ec.message()), "", "bad_request");
}

// The path a target names: an origin form's up to its query; an absolute form's (`http://host/path?q`, RFC 9112
// 3.2.2) after its authority, `/` when it has none.
std::string path_of(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() || !boost::beast::iequals(target.substr(0, scheme.size()), scheme)) continue;
    const std::string_view rest = target.substr(scheme.size());
    const size_t path = rest.find_first_of("/?#");
    if (path == std::string_view::npos || rest[path] != '/') return "/";
    return std::string(rest.substr(path, rest.find_first_of("?#", path) - path));
  }
  return std::string(target.substr(0, target.find('?')));
}

}  // namespace

struct RequestReader::Parser {
  http::request_parser<http::string_body> parser;
};

RequestReader::RequestReader(const HttpLimits& limits) : parser_(std::make_unique<Parser>()), limits_(limits) {
  auto& parser = parser_->parser;
  parser.header_limit(
      static_cast<uint32_t>(std::min<size_t>(limits_.max_header_bytes, std::numeric_limits<uint32_t>::max())));
  parser.body_limit(boost::none);  // the declared size is judged after the key (see read_body)
  parser.eager(false);             // stop after the header
}

RequestReader::~RequestReader() = default;

size_t RequestReader::feed(std::string_view data) {
  size_t used = 0;
  // RFC 9112 2.2: empty lines before a request line are ignored (some clients end a body with an extra CRLF).
  while (state_ == State::header && !started_ && used < data.size() && (data[used] == '\r' || data[used] == '\n'))
    ++used;
  if (used < data.size()) started_ = true;
  auto& parser = parser_->parser;
  while (used < data.size() && (state_ == State::header || state_ == State::body)) {
    boost::system::error_code ec;
    size_t n = 0;
    try {
      n = parser.put(boost::asio::buffer(data.data() + used, data.size() - used), ec);
    } catch (const std::length_error&) {
      // Beast's fields hold a name or value of at most 65,535 bytes and throw past it (a header above a large
      // --max-header-bytes, or a trailer): the client's doing, so a 431 like any other oversized field.
      throw ApiError(431, "a header or trailer field is larger than 65535 bytes", "", "request_header_too_large");
    }
    used += n;
    if (ec == http::error::need_more) {
      // In a chunked body Beast waits for a whole chunk-size line, or for the last chunk's whole trailer, before
      // it takes any of it: those bytes sit in the connection's buffer, so they are held to the header's limit.
      if (state_ == State::body && data.size() - used > limits_.max_header_bytes)
        throw ApiError(431,
                       fmt::format("a chunk header or the trailer is larger than {} bytes (--max-header-bytes)",
                                   limits_.max_header_bytes),
                       "", "request_header_too_large");
      break;
    }
    if (ec) throw refusal(ec, limits_);
    if (state_ == State::header && parser.is_header_done()) {
      on_header();
      state_ = State::header_done;
    } else if (state_ == State::body && parser.is_done()) {
      check_trailer_fields();
      state_ = State::complete;
    } else if (n == 0) {
      break;
    }
  }
  return used;
}

void RequestReader::on_header() {
  const auto& req = parser_->parser.get();
  size_t fields = 0;
  for (const auto& field : req) {
    if (++fields > limits_.max_header_fields)
      throw ApiError(431, fmt::format("the request has more than {} header lines", limits_.max_header_fields), "",
                     "request_header_too_large");
    head_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  // RFC 9112 3.2: exactly one Host on HTTP/1.1, at most one before it.
  const size_t hosts = req.count(http::field::host);
  if (hosts > 1 || (hosts == 0 && req.version() >= 11))
    throw ApiError(400, fmt::format("a request has one Host header (HTTP/1.1 needs it); this one has {}", hosts), "",
                   "invalid_host");
  head_.method = std::string(req.method_string());
  head_.target = std::string(req.target());
  head_.path = path_of(head_.target);
}

void RequestReader::check_trailer_fields() const {
  // A chunked body's trailer fields join the header's in the parsed message: the header line limit covers both.
  const auto& req = parser_->parser.get();
  if (static_cast<size_t>(std::distance(req.begin(), req.end())) > limits_.max_header_fields)
    throw ApiError(431, fmt::format("the request has more than {} header and trailer lines", limits_.max_header_fields),
                   "", "request_header_too_large");
}

void RequestReader::read_body() {
  auto& parser = parser_->parser;
  // The request gate refuses a declared size past the limit before any caller gets here; checked again because Beast
  // reserves the declared size as soon as the body starts, whatever body_limit says from now on (a Content-Length of
  // 10^18 was an allocation of 10^18 bytes: found by tests/fuzz/request_reader_fuzz).
  if (const auto length = parser.content_length(); length && *length > limits_.max_body_bytes)
    throw ApiError(413,
                   fmt::format("the request body is larger than {} bytes (--max-body-bytes)", limits_.max_body_bytes),
                   "", "request_too_large");
  parser.body_limit(limits_.max_body_bytes);
  parser.eager(true);
  state_ = parser.is_done() ? State::complete : State::body;
}

ApiError RequestReader::incomplete() const {
  return ApiError(400, "the connection was closed before the request was complete", "", "incomplete_request");
}

std::optional<uint64_t> RequestReader::content_length() const {
  auto length = parser_->parser.content_length();
  if (!length) return std::nullopt;
  return *length;
}

bool RequestReader::chunked() const { return parser_->parser.chunked(); }

bool RequestReader::keep_alive() const { return parser_->parser.get().keep_alive(); }

bool RequestReader::expects_continue() const {
  const auto& req = parser_->parser.get();
  return req.version() >= 11 && boost::beast::iequals(req[http::field::expect], "100-continue");
}

bool RequestReader::http_1_0() const { return parser_->parser.get().version() < 11; }

size_t RequestReader::body_bytes() const {
  const std::string& body = parser_->parser.get().body();
  return body.empty() ? 0 : body.capacity();  // an empty string's capacity is its inline buffer, no allocation
}

HttpRequest RequestReader::take_request() {
  head_.body = std::move(parser_->parser.get().body());
  return std::move(head_);
}

}  // namespace duet::server
