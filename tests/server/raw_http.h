#pragma once
// A loopback TCP client that writes raw bytes and reads raw answers, for what an HTTP library will not send:
// partial requests, pipelined ones, bodies that never end, clients that stop reading or half-close.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace duet::testing {

class RawClient {
 public:
  explicit RawClient(int port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    // A small receive buffer makes a client that stops reading push back on the server sooner.
    if (receive_buffer > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  // False once the server closed or reset the connection.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void shut_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Whether bytes (or the end) can be read within `timeout`.
  bool readable(std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }
  // Reads until the server closes, `marker` has arrived, or `timeout` passes; `closed` says whether it closed.
  std::string read(std::chrono::milliseconds timeout, std::string_view marker = {}) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (marker.empty() || out.find(marker) == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !readable(left)) break;
      char buffer[65536];
      ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }
  bool closed = false;

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// The status code of the first response in `bytes` (0 when there is none).
inline int status_of(std::string_view bytes) {
  if (!bytes.starts_with("HTTP/1.")) return 0;
  return std::atoi(std::string(bytes.substr(9, 3)).c_str());
}

// How many responses (status lines) `bytes` holds.
inline int responses_in(std::string_view bytes) {
  int count = 0;
  for (size_t at = bytes.find("HTTP/1.1 "); at != std::string_view::npos; at = bytes.find("HTTP/1.1 ", at + 1)) ++count;
  return count;
}

}  // namespace duet::testing
