// The request reader and the header gate on bytes alone, no sockets: limits enforced while reading, framing that
// conflicts, pipelined requests, and the order of the decisions made from a header.
#include "server/request_reader.h"

#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/request_gate.h"

namespace duet::server {
namespace {

HttpLimits small_limits() {
  HttpLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_header_fields = 8;
  limits.max_body_bytes = 100;
  return limits;
}

// Feeds `bytes` (in pieces of `step`) through header and body, as the connection does; returns the bytes used.
size_t read_all(RequestReader& reader, std::string_view bytes, size_t step = 1 << 20) {
  size_t used = 0;
  std::string pending;
  for (size_t at = 0; at < bytes.size(); at += step) {
    pending += bytes.substr(at, step);
    size_t n = reader.feed(pending);
    if (reader.state() == RequestReader::State::header_done) {
      reader.read_body();
      n += reader.feed(std::string_view(pending).substr(n));
    }
    used += n;
    pending.erase(0, n);
    if (reader.state() == RequestReader::State::complete) break;
  }
  return used;
}

TEST(RequestReader, ReadsARequestByteByByteAndStopsAtItsEnd) {
  const std::string first = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
  const std::string second = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  RequestReader reader(small_limits());
  EXPECT_EQ(read_all(reader, first + second, 1), first.size());
  ASSERT_EQ(reader.state(), RequestReader::State::complete);
  HttpRequest request = reader.take_request();
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "/v1/completions?x=1");
  EXPECT_EQ(request.path, "/v1/completions");
  EXPECT_EQ(request.header("content-length"), "5");
  EXPECT_EQ(request.body, "hello");

  RequestReader next(small_limits());  // the pipelined request after it
  EXPECT_EQ(read_all(next, second), second.size());
  EXPECT_EQ(next.take_request().path, "/health");
}

TEST(RequestReader, StopsAfterTheHeaderUntilTheBodyIsAccepted) {
  RequestReader reader(small_limits());
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
  EXPECT_EQ(reader.feed(head + "abc"), head.size());
  EXPECT_EQ(reader.state(), RequestReader::State::header_done);
  EXPECT_TRUE(reader.expects_continue());
  EXPECT_EQ(reader.content_length(), 3u);
  reader.read_body();
  EXPECT_EQ(reader.feed("abc"), 3u);
  EXPECT_EQ(reader.state(), RequestReader::State::complete);
}

TEST(RequestReader, JoinsAChunkedBodyAndCountsItAgainstTheLimit) {
  RequestReader reader(small_limits());
  read_all(reader,
           "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  ASSERT_EQ(reader.state(), RequestReader::State::complete);
  EXPECT_TRUE(reader.chunked());
  EXPECT_EQ(reader.take_request().body, "hello world");

  // 101 bytes in chunks of 10: refused while reading, naming the flag.
  std::string chunked = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 11; ++i) chunked += "a\r\n0123456789\r\n";
  RequestReader over(small_limits());
  ApiError error = error_of([&] { read_all(over, chunked, 7); });
  EXPECT_EQ(error.status(), 413);
  EXPECT_EQ(error.code(), "request_too_large");
  EXPECT_NE(std::string(error.what()).find("--max-body-bytes"), std::string::npos) << error.what();
}

TEST(RequestReader, HeaderBytesAndLinesAreLimited) {
  RequestReader big(small_limits());
  std::string head = "GET /health HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(4000, 'a');
  ApiError bytes = error_of([&] { big.feed(head); });
  EXPECT_EQ(bytes.status(), 431);
  EXPECT_NE(std::string(bytes.what()).find("--max-header-bytes"), std::string::npos) << bytes.what();

  RequestReader many(small_limits());
  std::string lines = "GET /health HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 8; ++i) lines += "X-" + std::to_string(i) + ": 1\r\n";
  ApiError count = error_of([&] { many.feed(lines + "\r\n"); });
  EXPECT_EQ(count.status(), 431);
  EXPECT_NE(std::string(count.what()).find("more than 8 header lines"), std::string::npos) << count.what();

  RequestReader eight(small_limits());  // the control: eight lines are allowed
  lines = "GET /health HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 7; ++i) lines += "X-" + std::to_string(i) + ": 1\r\n";
  eight.feed(lines + "\r\n");
  EXPECT_EQ(eight.state(), RequestReader::State::header_done);
}

// Beast throws std::length_error for a field over 65,535 bytes; trailers wait whole in the buffer. Both are 431.
TEST(RequestReader, TrailersAreHeldToTheHeaderLimitsAndNeverThrowPastThem) {
  HttpLimits roomy = small_limits();
  roomy.max_header_bytes = 1 << 20;
  const std::string chunked = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n";
  RequestReader huge(roomy);
  EXPECT_EQ(error_of([&] { read_all(huge, chunked + "X-T: " + std::string(70000, 't') + "\r\n\r\n"); }).status(), 431);

  RequestReader header(roomy);
  EXPECT_EQ(error_of([&] {
              header.feed("GET / HTTP/1.1\r\nHost: a\r\nX-H: " + std::string(70000, 'h') + "\r\n\r\n");
            }).status(),
            431);

  RequestReader long_trailer(small_limits());  // 2048 bytes of header limit, a 3000-byte trailer still arriving
  EXPECT_EQ(error_of([&] { read_all(long_trailer, chunked + "X-T: " + std::string(3000, 't'), 100); }).code(),
            "request_header_too_large");

  RequestReader many(small_limits());  // 8 lines allowed: two header lines and seven trailer lines are nine
  std::string lines;
  for (int i = 0; i < 7; ++i) lines += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(error_of([&] { read_all(many, chunked + lines + "\r\n"); }).status(), 431);

  RequestReader fine(small_limits());  // the control
  read_all(fine, chunked + "X-T: t\r\n\r\n");
  ASSERT_EQ(fine.state(), RequestReader::State::complete);
  EXPECT_EQ(fine.take_request().body, "a");
}

TEST(RequestReader, SizesThatConflictOrAreNotNumbersAre400) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Content-Length: 5\r\nContent-Length: 6\r\n", "invalid_content_length"},
      {"Content-Length: -1\r\n", "invalid_content_length"},
      {"Content-Length: 1e3\r\n", "invalid_content_length"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "invalid_content_length"},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "invalid_transfer_encoding"},
  };
  for (const auto& [headers, code] : cases) {
    RequestReader reader(small_limits());
    const std::string request = "POST /x HTTP/1.1\r\nHost: a\r\n" + headers + "\r\nhello";
    ApiError error = error_of([&] { reader.feed(request); });
    EXPECT_EQ(error.status(), 400) << headers;
    EXPECT_EQ(error.code(), code) << headers;
  }
  RequestReader same(small_limits());  // equal repeated values are one size (RFC 9110 8.6)
  same.feed("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(same.content_length(), 5u);
}

// Found by tests/fuzz/request_reader_fuzz (seeds/request_reader_fuzz/huge_content_length): Beast reserves a declared
// body size as the body starts, so a Content-Length of 10^18 was an allocation of 10^18 bytes unless the reader itself
// refuses it. The request gate refuses it first in the server; the reader must not depend on that.
TEST(RequestReader, ADeclaredLengthPastTheLimitIs413BeforeAByteIsKept) {
  const auto head = [](const std::string& length) {
    return "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: " + length + "\r\n\r\n";
  };
  RequestReader huge(small_limits());
  ASSERT_EQ(huge.feed(head("1000000000000000000")), head("1000000000000000000").size());
  ASSERT_EQ(huge.state(), RequestReader::State::header_done);
  const ApiError error = error_of([&] {
    huge.read_body();
    huge.feed("x");
  });
  EXPECT_EQ(error.status(), 413);
  EXPECT_EQ(error.code(), "request_too_large");

  RequestReader over(small_limits());  // one byte over the 100-byte limit, and the control: exactly the limit
  EXPECT_EQ(error_of([&] { read_all(over, head("101") + std::string(101, 'a')); }).status(), 413);
  RequestReader at(small_limits());
  read_all(at, head("100") + std::string(100, 'a'));
  ASSERT_EQ(at.state(), RequestReader::State::complete);
  EXPECT_EQ(at.take_request().body.size(), 100u);
}

// Found by request_reader_fuzz (seeds/request_reader_fuzz/beast_chunk_header_assert): a malformed trailer after the
// last chunk, fed a byte at a time, reached `assert(n >= 5)` in Boost.Beast's parse_chunk_header. With Beast's
// assertions off, as the Release build ships them and request_reader.cc compiles them in every build, Beast reads
// nothing out of bounds (scripts/sanitize.sh runs this under ASan) and the reader answers 400.
TEST(RequestReader, AMalformedTrailerFedByteByByteIs400) {
  const std::string bytes = "POST /v1/chay" + std::string(10, '\xff') +
                            "ize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nhello\r\n10\r\n\r0\r\n"
                            "s?x=1 &TTP/1inu\t\r\n\r\n";
  RequestReader reader(small_limits());
  const ApiError error = error_of([&] { read_all(reader, bytes, 1); });
  EXPECT_EQ(error.status(), 400);
  EXPECT_EQ(error.code(), "bad_request");
}

TEST(RequestReader, GarbageIs400AndEmptyLinesBeforeARequestAreSkipped) {
  RequestReader garbage(small_limits());
  EXPECT_EQ(error_of([&] { garbage.feed("\x16\x03\x01 hello\r\n\r\n"); }).code(), "bad_request");
  RequestReader lines(small_limits());
  lines.feed("\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(lines.state(), RequestReader::State::header_done);
  RequestReader blank(small_limits());
  blank.feed("\r\n");
  EXPECT_FALSE(blank.started());
}

// RFC 9112 3.2: an HTTP/1.1 request without a Host header, or any request with two, is 400.
TEST(RequestReader, HostIsRequiredOnceOnHttp11) {
  auto host_error = [](const std::string& head) {
    RequestReader reader(small_limits());
    return error_of([&] { reader.feed(head + "\r\n"); });
  };
  EXPECT_EQ(host_error("GET /health HTTP/1.1\r\n").code(), "invalid_host");
  EXPECT_EQ(host_error("GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n").status(), 400);
  EXPECT_EQ(host_error("GET /health HTTP/1.0\r\nHost: a\r\nhost: a\r\n").code(), "invalid_host");
  for (const char* fine : {"GET /health HTTP/1.1\r\nHost: a\r\n\r\n", "GET /health HTTP/1.0\r\n\r\n"}) {
    RequestReader reader(small_limits());  // the controls: one Host, and HTTP/1.0 without one
    reader.feed(fine);
    EXPECT_EQ(reader.state(), RequestReader::State::header_done) << fine;
  }
}

// RFC 9112 3.2.2: a server accepts the absolute form of a target (what a client sends to a proxy) and routes it
// by its path.
TEST(RequestReader, AbsoluteFormTargetsAreRoutedByTheirPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://x/health", "/health"}, {"HTTPS://x:8080/v1/models?a=/b", "/v1/models"}, {"http://x", "/"},
      {"http://x?q=1", "/"},          {"/http://x/health", "/http://x/health"},  // the control: an origin form that
                                                                                 // only looks like a URL
  };
  for (const auto& [target, path] : cases) {
    RequestReader reader(small_limits());
    reader.feed("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_EQ(reader.state(), RequestReader::State::header_done) << target;
    EXPECT_EQ(reader.head().path, path) << target;
    EXPECT_EQ(reader.head().target, target);
  }
}

// The gate's order: shutting down, key, encoding, framing, route, length, size.
struct Gate {
  RouteTable routes;
  ApiKeys keys{{"secret"}};
  Gate() {
    routes.add(RouteTable::Method::post, "/v1/x", [](const HttpRequest&) { return HttpResponse{}; });
    routes.add(
        RouteTable::Method::get, "/health", [](const HttpRequest&) { return HttpResponse{}; }, false);
  }
  std::vector<std::string> cors_origins;
  bool loading = false;
  GateVerdict check(HttpRequest head, std::optional<uint64_t> length = 2, bool chunked = false,
                    bool shutting_down = false) {
    head.path = head.target;
    return check_request_head(head, length, chunked,
                              GateRules{routes, keys, 100, shutting_down, &cors_origins, loading});
  }
  static int status(const GateVerdict& verdict) { return verdict.refusal ? verdict.refusal->status : 0; }
};

TEST(RequestGate, DecidesFromTheHeaderInOrder) {
  Gate gate;
  const HttpHeaders key = {{"Authorization", "Bearer secret"}};
  auto with = [&](HttpHeaders extra) {
    HttpHeaders all = key;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", key, ""}, 2, false, true)), 503);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", {}, ""})), 401);
  EXPECT_EQ(Gate::status(gate.check({"GET", "/nope", "", {}, ""})), 401) << "unknown paths need the key too";
  EXPECT_EQ(Gate::status(gate.check({"GET", "/health", "", {}, ""})), 0) << "/health needs none";
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", {{"Content-Encoding", "gzip"}}, ""})), 401)
      << "the key comes before anything about the body";
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", with({{"Content-Encoding", "gzip"}}), ""})), 415);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", with({{"Content-Encoding", "identity"}}), ""})), 0);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", with({{"Transfer-Encoding", "gzip"}}), ""}, {})), 501);
  EXPECT_EQ(
      Gate::status(gate.check({"POST", "/v1/x", "", with({{"Transfer-Encoding", "gzip, chunked"}}), ""}, {}, true)),
      501);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", with({{"Transfer-Encoding", "chunked"}}), ""}, {}, true)), 0);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/nope", "", key, ""})), 404);
  GateVerdict wrong_method = gate.check({"GET", "/v1/x", "", key, ""});
  EXPECT_EQ(Gate::status(wrong_method), 405);
  EXPECT_EQ(wrong_method.route_name, "/v1/x");
  EXPECT_EQ(wrong_method.refusal->headers.back(), (std::pair<std::string, std::string>{"Allow", "POST"}));
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", key, ""}, {})), 411);
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", key, ""}, 101)), 413);
  GateVerdict fine = gate.check({"POST", "/v1/x", "", key, ""}, 100);
  EXPECT_EQ(Gate::status(fine), 0);
  ASSERT_NE(fine.route, nullptr);
  EXPECT_EQ(fine.route->path, "/v1/x");
  EXPECT_EQ(gate.check({"HEAD", "/health", "", {}, ""}, {}).route->path, "/health") << "HEAD takes the GET route";
}

// While the model loads only /health reaches its route; the rest is 503 model_loading (after the key check, so a
// client without a key still learns nothing).
TEST(RequestGate, WhileLoadingOnlyHealthIsServed) {
  Gate gate;
  gate.loading = true;
  const HttpHeaders key = {{"Authorization", "Bearer secret"}};
  GateVerdict busy = gate.check({"POST", "/v1/x", "", key, ""});
  ASSERT_EQ(Gate::status(busy), 503);
  EXPECT_NE(busy.refusal->body.find("model_loading"), std::string::npos);
  EXPECT_EQ(busy.refusal->headers.back(), (std::pair<std::string, std::string>{"Retry-After", "1"}));
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", {}, ""})), 401);
  EXPECT_EQ(Gate::status(gate.check({"GET", "/health", "", {}, ""}, {})), 0);
  gate.loading = false;
  EXPECT_EQ(Gate::status(gate.check({"POST", "/v1/x", "", key, ""})), 0);
}

// A CORS preflight is answered before the key check, the same on every path; without --cors-origin it is not one.
TEST(RequestGate, PreflightsAreAnsweredBeforeTheKeyOnlyWithCorsOrigins) {
  Gate gate;
  const HttpHeaders preflight = {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}};
  EXPECT_EQ(Gate::status(gate.check({"OPTIONS", "/v1/x", "", preflight, ""}, {})), 401) << "CORS is off by default";
  gate.cors_origins = {"https://app.example"};
  GateVerdict known = gate.check({"OPTIONS", "/v1/x", "", preflight, ""}, {});
  GateVerdict unknown = gate.check({"OPTIONS", "/nope", "", preflight, ""}, {});
  ASSERT_EQ(Gate::status(known), 204);
  EXPECT_EQ(known.refusal->headers, unknown.refusal->headers);
  EXPECT_EQ(Gate::status(gate.check({"OPTIONS",
                                     "/v1/x",
                                     "",
                                     {{"Origin", "https://other.example"}, {"Access-Control-Request-Method", "POST"}},
                                     ""},
                                    {})),
            403);
  EXPECT_EQ(Gate::status(gate.check({"OPTIONS", "/v1/x", "", {{"Origin", "https://app.example"}}, ""}, {})), 401)
      << "an OPTIONS that is not a preflight is an ordinary request";
  gate.cors_origins = {"*"};
  EXPECT_EQ(Gate::status(gate.check({"OPTIONS",
                                     "/v1/x",
                                     "",
                                     {{"Origin", "https://other.example"}, {"Access-Control-Request-Method", "POST"}},
                                     ""},
                                    {})),
            204);
}

}  // namespace
}  // namespace duet::server
