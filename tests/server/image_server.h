#pragma once
// A small image server on 127.0.0.1 for the tests of remote image URLs (server/image_fetch.h, duet serve
// --allow-image-urls): httplib on a thread of its own, plain or TLS (tests/fixtures/tls, a test authority the system
// does not know), with the answers those tests need; and a port that takes connections and never answers.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "../tests_dir.h"

namespace duet::testing {

inline std::string tls_fixture(const std::string& name) { return tests_dir() + "/fixtures/tls/" + name; }

class ImageServer {
 public:
  // `image`: the bytes /image.png answers. `large_bytes`: the size /large.png declares and sends.
  explicit ImageServer(std::string image, bool tls = false, size_t large_bytes = 4096)
      : image_(std::move(image)), tls_(tls), large_bytes_(large_bytes) {
    if (tls)
      server_ =
          std::make_unique<httplib::SSLServer>(tls_fixture("server.pem").c_str(), tls_fixture("server.key").c_str());
    else
      server_ = std::make_unique<httplib::Server>();
    routes();
    port_ = server_->bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("image server: cannot bind 127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ImageServer() {
    server_->stop();
    thread_.join();
  }
  ImageServer(const ImageServer&) = delete;
  ImageServer& operator=(const ImageServer&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url(const std::string& path) const { return (tls_ ? "https://" : "http://") + endpoint() + path; }
  int requests() const { return requests_.load(); }

 private:
  void routes() {
    server_->set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
      ++requests_;
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server_->Get("/image.png",
                 [this](const httplib::Request&, httplib::Response& res) { res.set_content(image_, "image/png"); });
    // Bytes that are no image, labelled as one (the decoder refuses them) and as a page (the fetch refuses it).
    server_->Get("/not-image.png", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("just some text, not an image", "image/png");
    });
    server_->Get("/page.html", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("<html><body>an image of a cat</body></html>", "text/html");
    });
    server_->Get("/gzip.png", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(image_, "image/png");
      res.set_header("Content-Encoding", "gzip");
    });
    // Declares its size up front; /endless.png sends chunks without one until the client leaves.
    server_->Get("/large.png", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(large_bytes_, 'x'), "image/png");
    });
    server_->Get("/endless.png", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("image/png", [](size_t, httplib::DataSink& sink) {
        const std::string chunk(64 * 1024, 'x');
        return sink.write(chunk.data(), chunk.size());
      });
    });
    // /redirect?to=URL: 302 to URL; /hops/N: N redirects, then the image; /relative: a relative Location.
    server_->Get("/redirect", [](const httplib::Request& req, httplib::Response& res) {
      res.set_redirect(req.get_param_value("to"), 302);
    });
    server_->Get(R"(/hops/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
      const int n = std::stoi(req.matches[1]);
      if (n == 0)
        res.set_content(image_, "image/png");
      else
        res.set_redirect("/hops/" + std::to_string(n - 1), n % 2 == 0 ? 301 : 307);
    });
    server_->Get("/relative", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("image.png?from=relative", 303);
    });
  }

  std::string image_;
  bool tls_;
  size_t large_bytes_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0};
};

// A port on 127.0.0.1 that takes connections (the kernel completes them) and never reads or answers.
class SilentPort {
 public:
  SilentPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0)
      throw std::runtime_error("silent port: cannot listen on 127.0.0.1");
    port_ = ntohs(address.sin_port);
  }
  ~SilentPort() { ::close(fd_); }
  SilentPort(const SilentPort&) = delete;
  SilentPort& operator=(const SilentPort&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace duet::testing
