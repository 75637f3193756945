// Remote image URLs (server/image_fetch.h) fetched from test servers on 127.0.0.1 (image_server.h), allowed as exact
// private endpoints the way --allow-image-urls-from-private allows them: the bytes over http and https (the server's
// certificate checked against a test authority, by address and by name), redirects (absolute, relative, up to the
// limit), and each refusal with its reason: an address that is not public (the first URL, any address a name resolves
// to, a redirect's), a body over the cap (declared or sent), the deadline (a port that never answers), a status other
// than 200, a page, an encoded body, an untrusted or misnamed certificate, URLs that are not plain http(s).
#include "server/image_fetch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include "image_server.h"

namespace duet::server::image_fetch_test {
namespace {

using ::duet::testing::ImageServer;
using ::duet::testing::SilentPort;
namespace ip = boost::asio::ip;

std::string small_png() {
  std::ifstream in(::duet::testing::tests_dir() + "/fixtures/vision/images/small_png.png", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

ImageEndpoint loopback(int port) { return {ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)}; }

ImageFetchOptions allowing(std::initializer_list<int> ports) {
  ImageFetchOptions o;
  o.max_bytes = 64 * 1024;
  o.timeout = std::chrono::milliseconds(2000);
  for (int port : ports) o.private_allowed.push_back(loopback(port));
  return o;
}

std::string bytes_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// The refusal's words, or "fetched" when there was none.
std::string refusal(const ImageFetcher& fetcher, const std::string& url) {
  try {
    fetcher.fetch(url);
    return "fetched";
  } catch (const ImageFetchError& error) {
    return error.what();
  }
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ImageFetch, TellsPublicAddressesFromTheRest) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"93.184.216.34", nullptr},
      {"8.8.8.8", nullptr},
      {"2606:4700:4700::1111", nullptr},
      {"::ffff:93.184.216.34", nullptr},  // v4-mapped: what it maps
      {"64:ff9b::808:808", nullptr},      // NAT64 of 8.8.8.8
      {"127.0.0.1", "loopback"},
      {"127.255.0.9", "loopback"},
      {"::1", "loopback"},
      {"::ffff:127.0.0.1", "loopback"},
      {"64:ff9b::7f00:1", "loopback"},  // NAT64 of 127.0.0.1
      {"2002:7f00:1::", "loopback"},    // 6to4 of 127.0.0.1
      {"10.1.2.3", "private"},
      {"172.16.0.1", "private"},
      {"172.31.255.255", "private"},
      {"192.168.1.1", "private"},
      {"::ffff:10.0.0.1", "private"},
      {"fd00::1", "private"},
      {"169.254.169.254", "link-local"},
      {"::ffff:169.254.169.254", "link-local"},
      {"fe80::1", "link-local"},
      {"224.0.0.1", "multicast"},
      {"ff02::1", "multicast"},
      {"0.0.0.0", "unspecified"},
      {"::", "unspecified"},
      {"100.64.0.1", "shared"},
      {"255.255.255.255", "reserved"},
      {"192.0.2.1", "documentation"},
      {"2001:db8::1", "documentation"},
      {"2001::1", "reserved"},   // Teredo
      {"::7f00:1", "reserved"},  // IPv4-compatible
      {"fec0::1", "site-local"},
  };
  for (const auto& [text, kind] : cases) {
    const std::optional<std::string> got = non_public_address(ip::make_address(text));
    if (kind == nullptr) {
      EXPECT_FALSE(got) << text << ": " << got.value_or("");
    } else {
      ASSERT_TRUE(got) << text << " must not be public";
      EXPECT_TRUE(has(*got, kind)) << text << ": " << *got;
    }
  }
  // The neighbours of the private blocks are public.
  for (const char* text : {"172.32.0.1", "172.15.255.255", "11.0.0.1", "192.169.0.1", "169.255.0.1", "100.128.0.1"})
    EXPECT_FALSE(non_public_address(ip::make_address(text))) << text;
}

TEST(ImageFetch, ReadsEndpoints) {
  const auto v4 = parse_image_endpoint("10.0.0.5:8080");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->address, ip::make_address("10.0.0.5"));
  EXPECT_EQ(v4->port, 8080);
  const auto v6 = parse_image_endpoint("[fd00::5]:443");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->address, ip::make_address("fd00::5"));
  for (const char* bad :
       {"10.0.0.5", "10.0.0.5:0", "10.0.0.5:65536", "host.example:80", "[fd00::5]", ":80", "1.2.3.4:8x"})
    EXPECT_FALSE(parse_image_endpoint(bad)) << bad;
}

TEST(ImageFetch, FetchesOverHttpAndHttps) {
  const std::string png = small_png();
  ImageServer plain(png);
  ImageServer tls(png, true);
  ImageFetchOptions o = allowing({plain.port(), tls.port()});
  o.ca_file = ::duet::testing::tls_fixture("ca.pem");
  o.resolve = [](const std::string& host) {
    return host == "localhost" || host == "wrong.test" ? std::vector<ip::address>{ip::make_address("127.0.0.1")}
                                                       : std::vector<ip::address>{};
  };
  const ImageFetcher fetcher(o);
  EXPECT_EQ(bytes_of(fetcher.fetch(plain.url("/image.png"))), png);
  EXPECT_EQ(bytes_of(fetcher.fetch(tls.url("/image.png"))), png);  // by address: the certificate's IP name
  EXPECT_EQ(bytes_of(fetcher.fetch("HTTPS://localhost:" + std::to_string(tls.port()) + "/image.png#frag")), png);
  // The certificate must name the host, and come from a trusted authority.
  EXPECT_TRUE(
      has(refusal(fetcher, "https://wrong.test:" + std::to_string(tls.port()) + "/image.png"), "TLS handshake failed"));
  ImageFetchOptions system_authorities = o;
  system_authorities.ca_file.clear();
  const std::string untrusted = refusal(ImageFetcher(system_authorities), tls.url("/image.png"));
  EXPECT_TRUE(has(untrusted, "TLS handshake failed") && has(untrusted, "certificate")) << untrusted;
  // https to the http port and the other way round fail.
  EXPECT_TRUE(has(refusal(fetcher, "https://" + plain.endpoint() + "/image.png"), "TLS handshake failed"));
  EXPECT_NE(refusal(fetcher, "http://" + tls.endpoint() + "/image.png"), "fetched");
}

TEST(ImageFetch, FollowsAFewRedirects) {
  const std::string png = small_png();
  ImageServer server(png);
  const ImageFetcher fetcher(allowing({server.port()}));
  EXPECT_EQ(bytes_of(fetcher.fetch(server.url("/hops/3"))), png);  // 3 redirects, then the image
  EXPECT_EQ(bytes_of(fetcher.fetch(server.url("/relative"))), png);
  const std::string four = refusal(fetcher, server.url("/hops/4"));
  EXPECT_EQ(four, server.url("/hops/4") + ": more than 3 redirects");
  EXPECT_EQ(bytes_of(fetcher.fetch(server.url("/redirect?to=") + server.url("/image.png"))), png);
  EXPECT_TRUE(has(refusal(fetcher, server.url("/redirect?to=ftp://example.com/cat.png")), "not http(s)"));
}

// A redirect is checked as the first URL is: to another loopback port, to a v4-mapped loopback, to the cloud metadata
// address, to a private one; none of them is connected to. The loopback cases come first and stop the test when they
// fail, so that a planted fault of the check never reaches for an address off this machine.
TEST(ImageFetch, RedirectsToPrivateAddressesAreRefused) {
  ImageServer server(small_png());
  ImageServer other(small_png());
  const ImageFetcher fetcher(allowing({server.port()}));
  for (const auto& [target, kind] :
       {std::pair{other.url("/image.png"), "127.0.0.1 is a loopback address"},
        std::pair{"http://[::ffff:127.0.0.1]:" + std::to_string(other.port()) + "/image.png", "loopback"},
        std::pair{std::string("http://169.254.169.254/latest/meta-data/"), "169.254.169.254 is a link-local address"},
        std::pair{std::string("http://10.0.0.1/x.png"), "is a private address"}}) {
    const std::string url = server.url("/redirect?to=") + target;
    const std::string why = refusal(fetcher, url);
    ASSERT_TRUE(has(why, url + ": redirected to " + target + ": ")) << why;
    ASSERT_TRUE(has(why, kind)) << why;
    ASSERT_TRUE(has(why, "public addresses only")) << why;
    ASSERT_EQ(other.requests(), 0);
  }
  // Without the endpoint allowed, the first URL itself is refused.
  const std::string first = refusal(ImageFetcher(allowing({})), server.url("/image.png"));
  EXPECT_EQ(first,
            server.url("/image.png") + ": 127.0.0.1 is a loopback address; image URLs may reach public addresses only");
}

// Every address a name resolves to is checked, and the connection goes to the checked one: a resolver that answers a
// private address on its second call (DNS rebinding) is asked once per URL, and a name with one allowed address and
// one private one is refused (the allowed one would be connected to first). Only loopback is ever connected to, here
// and in any planted fault of these checks.
TEST(ImageFetch, ChecksEveryResolvedAddressAndConnectsToIt) {
  ImageServer server(small_png());
  ImageFetchOptions o = allowing({server.port()});
  int calls = 0;
  o.resolve = [&calls](const std::string& host) {
    ++calls;
    if (host == "mixed.test")
      return std::vector<ip::address>{ip::make_address("127.0.0.1"), ip::make_address("10.0.0.7")};
    return std::vector<ip::address>{ip::make_address(calls == 1 ? "127.0.0.1" : "127.0.0.2")};
  };
  const ImageFetcher fetcher(o);
  const std::string port = std::to_string(server.port());
  EXPECT_EQ(bytes_of(fetcher.fetch("http://rebind.test:" + port + "/image.png")), small_png());
  EXPECT_EQ(calls, 1);
  const std::string url = "http://mixed.test:" + port + "/image.png";
  EXPECT_EQ(refusal(fetcher, url),
            url + ": mixed.test resolves to 10.0.0.7, a private address; image URLs may reach public addresses only");
  EXPECT_EQ(server.requests(), 1);
  // The system's resolver: localhost is loopback, whichever of 127.0.0.1 and ::1 it gives.
  const std::string local = refusal(ImageFetcher(allowing({})), "http://localhost:" + port + "/image.png");
  EXPECT_TRUE(has(local, "localhost resolves to ") && has(local, ", a loopback address")) << local;
  EXPECT_EQ(server.requests(), 1);
}

TEST(ImageFetch, RefusesWhatIsNotASmallImage) {
  ImageServer server(small_png(), false, 64 * 1024 + 1);
  const ImageFetcher fetcher(allowing({server.port()}));
  EXPECT_TRUE(has(refusal(fetcher, server.url("/large.png")), "declares more than 65536 bytes"));
  EXPECT_TRUE(has(refusal(fetcher, server.url("/endless.png")), "the body passed 65536 bytes"));
  EXPECT_TRUE(has(refusal(fetcher, server.url("/page.html")), "the server sent text/html, not an image"));
  EXPECT_TRUE(has(refusal(fetcher, server.url("/gzip.png")), "encoded (gzip)"));
  EXPECT_TRUE(has(refusal(fetcher, server.url("/missing.png")), "the server answered 404 Not Found"));
  // The decoder, not the fetch, tells an image from other bytes labelled as one.
  EXPECT_EQ(bytes_of(fetcher.fetch(server.url("/not-image.png"))), "just some text, not an image");
}

TEST(ImageFetch, GivesUpAtTheDeadline) {
  SilentPort silent;
  ImageFetchOptions o = allowing({silent.port()});
  o.timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  const std::string why = refusal(ImageFetcher(o), "http://" + silent.endpoint() + "/image.png");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(has(why, "no answer within 0.5 s")) << why;
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 2.0);
}

TEST(ImageFetch, RefusesUrlsThatAreNotPlainHttp) {
  const ImageFetcher fetcher(allowing({}));
  for (const auto& [url, why] : std::vector<std::pair<std::string, std::string>>{
           {"ftp://example.com/cat.png", "only http:// and https:// URLs are fetched"},
           {"http://user:secret@example.com/cat.png", "a user name or password in the URL is refused"},
           {"http://example.com:0/cat.png", "the port is not a number from 1 to 65535"},
           {"http://example.com:99999/cat.png", "the port is not a number from 1 to 65535"},
           {"http://exa mple.com/cat.png", "a space, a control or a non-ASCII character"},
           {"http://example.com/cat.png\r\nX-Injected: 1", "a space, a control or a non-ASCII character"},
           {"http:///cat.png", "no host"},
           {"http://[::1/cat.png", "closing ']'"},
           {"http://[fe80::1%25eth0]/cat.png", "not an IPv6 address"},
           {"http://ex%61mple.com/cat.png", "not a host name"},
       }) {
    const std::string got = refusal(fetcher, url);
    EXPECT_TRUE(got.starts_with(url + ": ") && has(got, why)) << url << " -> " << got;
  }
}

}  // namespace
}  // namespace duet::server::image_fetch_test
