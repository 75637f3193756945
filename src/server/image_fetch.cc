#include "server/image_fetch.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <variant>

#include "base/error.h"

namespace duet::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

// IPv4: the special-purpose blocks of RFC 6890 and its successors (IANA's registry) that are not globally reachable.
namespace {
std::optional<std::string> non_public_v4(const asio::ip::address_v4& address) {
  const uint32_t x = address.to_uint();
  const auto in = [x](uint32_t net, int bits) { return (x >> (32 - bits)) == (net >> (32 - bits)); };
  if (in(0x00000000, 8)) return "unspecified (0.0.0.0/8)";
  if (in(0x0A000000, 8) || in(0xAC100000, 12) || in(0xC0A80000, 16)) return "private";
  if (in(0x64400000, 10)) return "shared (carrier-grade NAT, 100.64.0.0/10)";
  if (in(0x7F000000, 8)) return "loopback";
  if (in(0xA9FE0000, 16)) return "link-local";
  if (in(0xC0000000, 24)) return "reserved (IETF protocol assignments, 192.0.0.0/24)";
  if (in(0xC0000200, 24) || in(0xC6336400, 24) || in(0xCB007100, 24)) return "reserved (documentation)";
  if (in(0xC0586300, 24)) return "reserved (6to4 relay anycast, 192.88.99.0/24)";
  if (in(0xC6120000, 15)) return "reserved (benchmarking, 198.18.0.0/15)";
  if (in(0xE0000000, 4)) return "multicast";
  if (in(0xF0000000, 4)) return "reserved (240.0.0.0/4, broadcast)";
  return std::nullopt;
}

asio::ip::address_v4 v4_at(const asio::ip::address_v6::bytes_type& b, size_t at) {
  return asio::ip::address_v4({b[at], b[at + 1], b[at + 2], b[at + 3]});
}
}  // namespace

std::optional<std::string> non_public_address(const asio::ip::address& address) {
  if (address.is_v4()) return non_public_v4(address.to_v4());
  const asio::ip::address_v6 v6 = address.to_v6();
  const asio::ip::address_v6::bytes_type b = v6.to_bytes();
  const auto prefix = [&b](std::initializer_list<uint8_t> bytes) {
    return std::equal(bytes.begin(), bytes.end(), b.begin());
  };
  if (v6.is_unspecified()) return "unspecified";
  if (v6.is_loopback()) return "loopback";
  // Addresses that reach an IPv4 address are what that address is: v4-mapped (::ffff:a.b.c.d), NAT64's well-known
  // prefix (64:ff9b::a.b.c.d) and 6to4 (2002:AABB:CCDD::, the IPv4 address in bytes 2 to 5).
  if (v6.is_v4_mapped()) return non_public_v4(v4_at(b, 12));
  if (prefix({0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) return non_public_v4(v4_at(b, 12));
  if (prefix({0x20, 0x02})) return non_public_v4(v4_at(b, 2));
  if (std::all_of(b.begin(), b.begin() + 12, [](uint8_t v) { return v == 0; }))
    return "reserved (IPv4-compatible, ::/96)";
  if ((b[0] & 0xfe) == 0xfc) return "private (unique local, fc00::/7)";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "site-local";
  if (b[0] == 0xff) return "multicast";
  // Global unicast is 2000::/3, less its special blocks: IETF assignments (Teredo, which hides an IPv4 address,
  // among them), documentation.
  if ((b[0] & 0xe0) != 0x20) return "reserved (outside global unicast, 2000::/3)";
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] < 0x02) return "reserved (IETF protocol assignments, 2001::/23)";
  if (prefix({0x20, 0x01, 0x0d, 0xb8}) || (b[0] == 0x3f && b[1] == 0xff && (b[2] & 0xf0) == 0))
    return "reserved (documentation)";
  return std::nullopt;
}

std::optional<ImageEndpoint> parse_image_endpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(std::string(host), ec);
  unsigned port = 0;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec || error != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return std::nullopt;
  return ImageEndpoint{address, static_cast<uint16_t>(port)};
}

namespace {

struct Url {
  bool https = false;
  std::string host;  // lower case, without an IPv6 literal's brackets
  uint16_t port = 0;
  std::string target;  // path and query, "/" at least
  std::optional<asio::ip::address> literal;

  std::string authority() const {
    const std::string name = literal && literal->is_v6() ? "[" + host + "]" : host;
    return port == (https ? 443 : 80) ? name : fmt::format("{}:{}", name, port);
  }
  std::string text() const { return fmt::format("{}://{}{}", https ? "https" : "http", authority(), target); }
};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_no_case(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && lower(text.substr(0, prefix.size())) == prefix;
}

// What the fetch refuses is said in one form: "URL: why".
[[noreturn]] void refuse(std::string_view url, std::string_view why) {
  constexpr size_t kShown = 200;  // a URL is the client's own text; the message needs only its start
  const std::string shown = url.size() > kShown ? std::string(url.substr(0, kShown)) + "..." : std::string(url);
  throw ImageFetchError(fmt::format("{}: {}", shown, why));
}

Url parse_url(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      refuse(text, "the URL holds a space, a control or a non-ASCII character (percent-encode it)");
  Url url;
  size_t at = 0;
  if (starts_with_no_case(text, "https://")) {
    url.https = true;
    at = 8;
  } else if (starts_with_no_case(text, "http://")) {
    at = 7;
  } else {
    refuse(text, "only http:// and https:// URLs are fetched");
  }
  const size_t authority_end = std::min(text.find_first_of("/?#", at), text.size());
  const std::string_view authority = text.substr(at, authority_end - at);
  if (authority.find('@') != std::string_view::npos) refuse(text, "a user name or password in the URL is refused");
  std::string_view host = authority, port_text;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) refuse(text, "an IPv6 address without its closing ']'");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) refuse(text, "expected ':PORT' after the IPv6 address");
    if (!after.empty()) port_text = after.substr(1);
    boost::system::error_code ec;
    const asio::ip::address_v6 v6 = asio::ip::make_address_v6(std::string(host), ec);
    if (ec || v6.scope_id() != 0) refuse(text, "not an IPv6 address between the brackets");
    url.literal = v6;
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  if (host.empty()) refuse(text, "no host");
  url.host = lower(host);
  if (!url.literal) {
    if (url.host.size() > 253 || !std::all_of(url.host.begin(), url.host.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
        }))
      refuse(text, "the host is not a host name (letters, digits, '.', '-'; punycode for other scripts)");
    boost::system::error_code ec;
    const asio::ip::address_v4 v4 = asio::ip::make_address_v4(url.host, ec);
    if (!ec) url.literal = v4;
  }
  url.port = url.https ? 443 : 80;
  if (!port_text.empty()) {
    unsigned port = 0;
    const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (error != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
      refuse(text, "the port is not a number from 1 to 65535");
    url.port = static_cast<uint16_t>(port);
  }
  std::string_view rest = text.substr(authority_end);
  rest = rest.substr(0, std::min(rest.find('#'), rest.size()));
  if (!rest.starts_with('/')) url.target = "/";
  url.target.append(rest);
  return url;
}

// A redirect's Location, absolute or relative to the URL that answered it (RFC 3986 5.2, without dot segments, which
// the next server reads as it likes).
std::string redirect_target(const Url& base, std::string_view location) {
  if (starts_with_no_case(location, "http://") || starts_with_no_case(location, "https://"))
    return std::string(location);
  const std::string origin = fmt::format("{}://{}", base.https ? "https" : "http", base.authority());
  if (location.starts_with("//")) return (base.https ? "https:" : "http:") + std::string(location);
  if (location.starts_with('/')) return origin + std::string(location);
  const size_t scheme_end = location.find_first_of(":/?#");
  if (scheme_end != std::string_view::npos && location[scheme_end] == ':')
    refuse(location, "a redirect to a URL that is not http(s)");
  const std::string_view path = std::string_view(base.target).substr(0, base.target.find('?'));
  if (location.starts_with('?')) return origin + std::string(path) + std::string(location);
  return origin + std::string(path.substr(0, path.rfind('/') + 1)) + std::string(location);
}

// getaddrinfo on a thread of its own, so that a slow resolver cannot hold the fetch past its deadline (nothing can
// cancel getaddrinfo; the thread finishes on its own and frees what it shares). nullopt: the deadline came first.
std::optional<std::vector<asio::ip::address>> system_resolve(const std::string& host, Clock::time_point deadline) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    int status = 0;
    std::vector<asio::ip::address> addresses;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, host] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    std::vector<asio::ip::address> addresses;
    for (const addrinfo* a = status == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
        addresses.push_back(asio::ip::address_v4(ntohl(in->sin_addr.s_addr)));
      } else if (a->ai_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
        asio::ip::address_v6::bytes_type bytes;
        std::copy_n(in6->sin6_addr.s6_addr, 16, bytes.begin());
        addresses.push_back(asio::ip::address_v6(bytes, in6->sin6_scope_id));
      }
    }
    if (found != nullptr) freeaddrinfo(found);
    std::lock_guard lock(shared->mutex);
    shared->status = status;
    shared->addresses = std::move(addresses);
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mutex);
  if (!shared->done_cv.wait_until(lock, deadline, [&] { return shared->done; })) return std::nullopt;
  if (shared->status != 0)
    throw ImageFetchError(fmt::format("cannot resolve {}: {}", host, gai_strerror(shared->status)));
  return shared->addresses;
}

asio::ip::address unmapped(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  return address;
}

// Runs the io_context until the operation `start` began has completed (the stream's expiry bounds it) and returns
// its error.
template <typename Start>
beast::error_code wait(asio::io_context& io, Start&& start) {
  beast::error_code result = asio::error::operation_aborted;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

struct Redirect {
  std::string location;
};

// The streams that the HTTP request and answer go over (TCP, or TLS) and that TLS goes over (TCP) behind one type:
// Beast's HTTP write and reads are compiled once over it, not once for each stream, and TCP's reads and writes once,
// with one handler type, not once for each HTTP and TLS operation that calls them. Those instantiations were most of
// this file's compile time (docs/benchmarks.md, "Build time", seventh pass). Each stream gets the same calls with the
// same buffers (copied into a vector), so the expiry and TLS work as before; everything runs on the fetch's io_context.
class ByteStream {
 public:
  using executor_type = asio::any_io_executor;
  using lowest_layer_type = ByteStream;  // what asio::ssl::stream asks of the stream under it
  // A read's or a write's completion handler behind one type (move-only; Asio 1.26's any_completion_handler cannot be
  // posted: its executor lacks blocking.never). It has no executor of its own, so the stream's is used, as it was.
  class Handler {
   public:
    template <typename H>
    explicit Handler(H handler) : call_(std::make_unique<Call<H>>(std::move(handler))) {}
    void operator()(beast::error_code ec, std::size_t bytes) {
      const std::unique_ptr<Base> call = std::move(call_);
      call->run(ec, bytes);
    }

   private:
    struct Base {
      virtual ~Base() = default;
      virtual void run(beast::error_code ec, std::size_t bytes) = 0;
    };
    template <typename H>
    struct Call final : Base {
      explicit Call(H h) : handler(std::move(h)) {}
      void run(beast::error_code ec, std::size_t bytes) override { std::move(handler)(ec, bytes); }
      H handler;
    };
    std::unique_ptr<Base> call_;
  };
  template <typename Token>
  using Result = typename asio::async_result<std::decay_t<Token>, void(beast::error_code, std::size_t)>::return_type;

  virtual ~ByteStream() = default;
  virtual executor_type get_executor() = 0;
  ByteStream& lowest_layer() { return *this; }

  template <typename MutableBuffers, typename Token>
  Result<Token> async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, std::vector<asio::mutable_buffer> copied) {
          read_some(std::move(copied), Handler(std::move(handler)));
        },
        token,
        std::vector<asio::mutable_buffer>(asio::buffer_sequence_begin(buffers), asio::buffer_sequence_end(buffers)));
  }
  template <typename ConstBuffers, typename Token>
  Result<Token> async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, std::vector<asio::const_buffer> copied) {
          write_some(std::move(copied), Handler(std::move(handler)));
        },
        token,
        std::vector<asio::const_buffer>(asio::buffer_sequence_begin(buffers), asio::buffer_sequence_end(buffers)));
  }

 private:
  virtual void read_some(std::vector<asio::mutable_buffer> buffers, Handler handler) = 0;
  virtual void write_some(std::vector<asio::const_buffer> buffers, Handler handler) = 0;
};

template <typename Stream>
class ByteStreamOf final : public ByteStream {
 public:
  explicit ByteStreamOf(Stream& stream) : stream_(stream) {}
  executor_type get_executor() override { return stream_.get_executor(); }

 private:
  void read_some(std::vector<asio::mutable_buffer> buffers, Handler handler) override {
    stream_.async_read_some(std::move(buffers), std::move(handler));
  }
  void write_some(std::vector<asio::const_buffer> buffers, Handler handler) override {
    stream_.async_write_some(std::move(buffers), std::move(handler));
  }
  Stream& stream_;
};

}  // namespace

struct ImageFetcher::Tls {
  asio::ssl::context context{asio::ssl::context::tls_client};
};

ImageFetcher::ImageFetcher(ImageFetchOptions options) : options_(std::move(options)), tls_(std::make_unique<Tls>()) {
  SSL_CTX_set_min_proto_version(tls_->context.native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  if (options_.ca_file.empty())
    tls_->context.set_default_verify_paths(ec);
  else
    tls_->context.load_verify_file(options_.ca_file, ec);
  if (ec)
    fail("image URLs: cannot load the certificate authorities{}: {}",
         options_.ca_file.empty() ? "" : " of " + options_.ca_file, ec.message());
}

ImageFetcher::~ImageFetcher() = default;

namespace {

class Fetch {
 public:
  Fetch(const ImageFetchOptions& options, asio::ssl::context& tls, std::string_view url)
      : options_(options), tls_(tls), url_(url), deadline_(Clock::now() + options.timeout) {}

  std::vector<uint8_t> run() {
    std::string next(url_);
    for (int redirects = 0;; ++redirects) {
      const Url url = redirects == 0 ? parse_url(next) : redirected([&] { return parse_url(next); });
      auto answer = exchange(url);
      if (auto* body = std::get_if<std::vector<uint8_t>>(&answer)) return std::move(*body);
      if (redirects == options_.max_redirects)
        refuse(url_, fmt::format("more than {} redirects", options_.max_redirects));
      next = redirected([&] { return redirect_target(url, std::get<Redirect>(answer).location); });
      hop_ = fmt::format("redirected to {}: ", next.substr(0, 200));
    }
  }

 private:
  // A redirect's own refusal ("URL: why") as a refusal of the URL the client sent.
  template <typename F>
  auto redirected(F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const ImageFetchError& error) {
      refuse(url_, fmt::format("redirected to {}", error.what()));
    }
  }

  [[noreturn]] void refuse_hop(std::string_view why) const { refuse(url_, hop_ + std::string(why)); }

  std::string timeout_words() const {
    return fmt::format("no answer within {} s (--image-url-timeout)",
                       std::chrono::duration<double>(options_.timeout).count());
  }

  // Every address of the host, each checked: one that is not public refuses the URL (unless it is an allowed
  // endpoint), whichever of them a connection would have tried first.
  std::vector<asio::ip::tcp::endpoint> endpoints(const Url& url) const {
    std::vector<asio::ip::address> addresses;
    if (url.literal) {
      addresses.push_back(*url.literal);
    } else {
      try {
        if (options_.resolve) {
          addresses = options_.resolve(url.host);
        } else if (auto found = system_resolve(url.host, deadline_)) {
          addresses = std::move(*found);
        } else {
          refuse_hop(timeout_words());
        }
      } catch (const ImageFetchError& error) {
        refuse_hop(error.what());
      }
      if (addresses.empty()) refuse_hop(fmt::format("{} resolves to no address", url.host));
    }
    std::vector<asio::ip::tcp::endpoint> out;
    for (const asio::ip::address& address : addresses) {
      const std::optional<std::string> kind = non_public_address(address);
      const bool allowed = std::any_of(
          options_.private_allowed.begin(), options_.private_allowed.end(),
          [&](const ImageEndpoint& e) { return unmapped(e.address) == unmapped(address) && e.port == url.port; });
      if (kind && !allowed)
        refuse_hop(fmt::format("{} a {} address; image URLs may reach public addresses only",
                               url.literal ? address.to_string() + " is"
                                           : fmt::format("{} resolves to {},", url.host, address.to_string()),
                               *kind));
      out.emplace_back(address, url.port);
    }
    return out;
  }

  std::variant<std::vector<uint8_t>, Redirect> exchange(const Url& url) {
    const std::vector<asio::ip::tcp::endpoint> checked = endpoints(url);
    asio::io_context io;
    beast::tcp_stream tcp(io);
    connect(io, tcp, checked);
    ByteStreamOf<beast::tcp_stream> bytes(tcp);
    if (!url.https) return http_exchange(io, bytes, url);
    // TLS over the same one stream type, so that its reads and writes of TCP are compiled once too.
    beast::ssl_stream<ByteStream&> tls(bytes, tls_);
    SSL* ssl = tls.native_handle();
    if (url.literal) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), url.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, url.host.c_str());
      SSL_set1_host(ssl, url.host.c_str());
    }
    tls.set_verify_mode(asio::ssl::verify_peer);
    check(wait(io, [&](auto handler) { tls.async_handshake(asio::ssl::stream_base::client, std::move(handler)); }),
          "TLS handshake failed");
    ByteStreamOf<beast::ssl_stream<ByteStream&>> tls_bytes(tls);
    return http_exchange(io, tls_bytes, url);
  }

  // The one deadline bounds every step from here on (the stream's expiry).
  void connect(asio::io_context& io, beast::tcp_stream& tcp, const std::vector<asio::ip::tcp::endpoint>& checked) {
    tcp.expires_at(deadline_);
    check(wait(io, [&](auto handler) { tcp.async_connect(checked, std::move(handler)); }), "cannot connect");
  }

  // The GET and its answer, over a connected (and, for https, handshaken) stream.
  std::variant<std::vector<uint8_t>, Redirect> http_exchange(asio::io_context& io, ByteStream& stream, const Url& url) {
    http::request<http::empty_body> request{http::verb::get, url.target, 11};
    request.set(http::field::host, url.authority());
    request.set(http::field::user_agent, "duet");
    request.set(http::field::accept, "image/*");
    request.set(http::field::connection, "close");
    check(wait(io, [&](auto handler) { http::async_write(stream, request, std::move(handler)); }),
          "cannot send the request");
    http::response_parser<http::vector_body<uint8_t>> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(options_.max_bytes);
    beast::flat_buffer buffer;
    const beast::error_code header =
        wait(io, [&](auto handler) { http::async_read_header(stream, buffer, parser, std::move(handler)); });
    if (header == http::error::body_limit)
      refuse_hop(fmt::format("the server declares more than {} bytes, the limit", options_.max_bytes));
    check(header, "no answer read");
    const auto& head = parser.get();
    const unsigned status = head.result_int();
    if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
      const auto location = head.find(http::field::location);
      if (location == head.end() || location->value().empty())
        refuse_hop(fmt::format("the server answered {} without a Location", status));
      return Redirect{std::string(location->value())};
    }
    if (status != 200) refuse_hop(fmt::format("the server answered {} {}", status, std::string_view(head.reason())));
    if (const auto type = head.find(http::field::content_type);
        type != head.end() && starts_with_no_case(type->value(), "text/"))
      refuse_hop(fmt::format("the server sent {}, not an image", std::string_view(type->value())));
    if (const auto encoding = head.find(http::field::content_encoding);
        encoding != head.end() && !beast::iequals(encoding->value(), "identity"))
      refuse_hop(
          fmt::format("the body is encoded ({}); duet reads plain bodies only", std::string_view(encoding->value())));
    const beast::error_code body =
        wait(io, [&](auto handler) { http::async_read(stream, buffer, parser, std::move(handler)); });
    if (body == http::error::body_limit)
      refuse_hop(fmt::format("the body passed {} bytes, the limit", options_.max_bytes));
    check(body, "the body was not read whole");
    std::vector<uint8_t> bytes = parser.release().body();
    if (bytes.empty()) refuse_hop("the body is empty");
    return bytes;
  }

  void check(const beast::error_code& ec, std::string_view what) const {
    if (!ec) return;
    if (ec == beast::error::timeout) refuse_hop(timeout_words());
    refuse_hop(fmt::format("{}: {}", what, ec.message()));
  }

  const ImageFetchOptions& options_;
  asio::ssl::context& tls_;
  std::string_view url_;
  Clock::time_point deadline_;
  std::string hop_;  // "redirected to URL: " once a redirect was followed
};

}  // namespace

std::vector<uint8_t> ImageFetcher::fetch(std::string_view url) const {
  return Fetch(options_, tls_->context, url).run();
}

}  // namespace duet::server
