#pragma once
// Reads one HTTP/1.1 request from bytes as they arrive, with the limits enforced while reading: the header's bytes
// and lines, the body's bytes (a chunked body's too), and sizes that conflict or are not numbers. It stops after the
// header, so the server decides from the header alone (key, route, declared size) before a body byte is read.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "server/http_limits.h"
#include "server/http_types.h"

namespace duet::server {

class RequestReader {
 public:
  enum class State {
    header,       // reading the request line and headers
    header_done,  // the header is read; call read_body() to go on
    body,         // reading the body
    complete,     // take_request()
  };

  explicit RequestReader(const HttpLimits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Takes what it can of `data` and returns how many bytes it used: the rest is the next request's, or is needed
  // again with more after it. Throws ApiError for a request that breaks a rule (400, 413, 431).
  size_t feed(std::string_view data);
  State state() const { return state_; }
  // Whether any byte of this request has arrived (empty lines before a request line do not count).
  bool started() const { return started_; }
  // After header_done: read the body, at most limits.max_body_bytes of it, counted after chunked framing.
  void read_body();
  // The ApiError for a connection that ended (or half-closed) before the request was complete.
  ApiError incomplete() const;

  // From header_done on: the header (the body is empty until complete) and how the body is framed.
  const HttpRequest& head() const { return head_; }
  std::optional<uint64_t> content_length() const;
  bool chunked() const;
  bool keep_alive() const;
  bool expects_continue() const;  // `Expect: 100-continue` on HTTP/1.1
  bool http_1_0() const;

  // Bytes held for the body so far: its buffer's capacity (the declared length, or what a chunked body grew to) once
  // a byte of it arrived.
  size_t body_bytes() const;

  // Once complete: the request with its body.
  HttpRequest take_request();

 private:
  void on_header();
  void check_trailer_fields() const;

  struct Parser;  // Beast's request parser, kept out of the routes' includes
  std::unique_ptr<Parser> parser_;
  HttpLimits limits_;
  State state_ = State::header;
  bool started_ = false;
  HttpRequest head_;
};

}  // namespace duet::server
