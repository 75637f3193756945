#pragma once
// Remote image URLs (`duet serve --allow-image-urls`): an image part's http(s) URL fetched with a size cap (the
// data-URL limit), one deadline for the whole fetch, a few redirects, and never to an address that is not public. Every
// address a host name resolves to is checked, and the connection goes to a checked address, not to the name again, so
// DNS rebinding (a second lookup answering a private address) cannot get past the check; each redirect is checked the
// same way. What is not fetched is refused with the URL and the reason (ImageFetchError), never retried.
#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace duet::server {

class ImageFetchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImageEndpoint {
  boost::asio::ip::address address;
  uint16_t port = 0;
};

struct ImageFetchOptions {
  size_t max_bytes = size_t{20} << 20;        // the body, as a data URL's bytes (image::Limits::max_bytes)
  std::chrono::milliseconds timeout{10'000};  // resolving, connecting, TLS, every redirect and the body, together
  int max_redirects = 3;
  // Private endpoints (exact address and port) that may be fetched all the same (--allow-image-urls-from-private): an
  // image server on the operator's own network, or a test's server on 127.0.0.1. Every other private address stays
  // refused, redirects included.
  std::vector<ImageEndpoint> private_allowed{};
  // For tests only (no flag sets them): the certificate authorities https is checked against (a PEM file; empty: the
  // system's), and a resolver standing in for the system's (getaddrinfo).
  std::string ca_file{};
  std::function<std::vector<boost::asio::ip::address>(const std::string& host)> resolve{};
};

// What kind of address this is when it is not a public one ("loopback", "private", "link-local", "multicast",
// "unspecified", "reserved ..."); nullopt for a globally reachable unicast address. IPv4 and IPv6; an IPv6 address that
// carries an IPv4 one (v4-mapped, NAT64's 64:ff9b::/96, 6to4) is judged by the IPv4 address it reaches.
std::optional<std::string> non_public_address(const boost::asio::ip::address& address);

// "ADDRESS:PORT" or "[IPV6]:PORT" as --allow-image-urls-from-private takes it; nullopt when it is not one.
std::optional<ImageEndpoint> parse_image_endpoint(std::string_view text);

class ImageFetcher {
 public:
  // Throws duet::Error when the certificate authorities cannot be loaded.
  explicit ImageFetcher(ImageFetchOptions options);
  ~ImageFetcher();
  ImageFetcher(const ImageFetcher&) = delete;
  ImageFetcher& operator=(const ImageFetcher&) = delete;

  // The body a 200 answered for `url` (http:// or https://), after at most max_redirects redirects. Blocks the calling
  // thread until then, or until the deadline. Throws ImageFetchError naming the URL and why: not an http(s) URL, a
  // host that resolves to an address that is not public (any of them), a connection or TLS failure (an https server's
  // certificate is verified, its name too), the deadline passed, a status other than 200 and redirects, more than
  // max_bytes (declared or sent), too many redirects, a text/* body.
  std::vector<uint8_t> fetch(std::string_view url) const;

  const ImageFetchOptions& options() const { return options_; }

 private:
  struct Tls;
  ImageFetchOptions options_;
  std::unique_ptr<Tls> tls_;
};

}  // namespace duet::server
