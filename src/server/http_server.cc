#include "server/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace duet::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// File descriptors kept for everything but client connections (model files, the listening socket, logs).
constexpr int kReservedDescriptors = 128;
constexpr int kDefaultMaxConnections = 10000;
// Connections past --max-connections that are still answered 503 (each for a moment); beyond these, a new
// connection is closed at once.
constexpr size_t kRefusalsInFlight = 256;
// After the grace period, how long cancelled requests get to send their last bytes before every socket closes.
constexpr auto kFinalWrites = std::chrono::seconds(5);
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

unsigned io_threads() { return std::clamp(std::thread::hardware_concurrency(), 2u, 4u); }
unsigned worker_threads() { return std::max(std::thread::hardware_concurrency(), 2u); }
unsigned large_body_threads() { return std::max(std::thread::hardware_concurrency() / 4, 1u); }

HttpResponse too_many_connections(int max_connections) {
  ApiError error(503,
                 fmt::format("the server has {} connections open (--max-connections); retry later", max_connections),
                 "", "too_many_connections");
  error.retry_after_s = 1;
  return error_response(error);
}

HttpResponse too_many_from_client(int max_per_client) {
  ApiError error(429,
                 fmt::format("this client has {} connections open (--max-connections-per-client); reuse them or "
                             "retry later",
                             max_per_client),
                 "", "too_many_connections_from_client");
  error.retry_after_s = 1;
  return error_response(error);
}

}  // namespace

int effective_max_connections(int requested) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  const auto descriptors = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, 1u << 30));
  const int64_t room = descriptors - kReservedDescriptors;
  if (requested < 0) fail("--max-connections {}: must be 0 (as many as file descriptors allow) or more", requested);
  if (requested == 0) {
    if (room < 1) fail("this process may open only {} files (ulimit -n): too few to serve", descriptors);
    return static_cast<int>(std::min<int64_t>(room, kDefaultMaxConnections));
  }
  if (requested > room)
    fail(
        "--max-connections {}: this process may open {} files (ulimit -n), {} of them kept for other uses; raise "
        "ulimit -n or lower --max-connections",
        requested, descriptors, kReservedDescriptors);
  return requested;
}

HttpServer::HttpServer(ServerContext& context)
    : context_(context),
      keys_(context.options.api_keys),
      bodies_(context.options.http.max_buffered_body_bytes != 0
                  ? context.options.http.max_buffered_body_bytes
                  : default_buffered_body_bytes(context.options.http.max_body_bytes)),
      shared_{context, routes_, keys_, context.options.http, workers_, large_workers_, bodies_, registry_},
      strand_(asio::make_strand(io_)),
      acceptor_(strand_),
      accept_retry_(strand_),
      grace_timer_(strand_),
      workers_(worker_threads()),
      large_workers_(large_body_threads()) {
  add_chat_route(routes_, context_);
  add_completions_route(routes_, context_);
  add_responses_route(routes_, context_);
  add_stored_responses_routes(routes_, context_);
  add_messages_routes(routes_, context_);
  add_web_ui_route(routes_, context_);
  add_status_routes(routes_, context_);
  add_tokenize_routes(routes_, context_);
  add_systemone_route(routes_, context_);
  registry_.on_empty([this] { asio::post(strand_, [this] { check_stopped(); }); });
}

HttpServer::~HttpServer() {
  registry_.on_empty(nullptr);  // connections destroyed with io_ must not post into it
  workers_.join();
  large_workers_.join();
}

int HttpServer::bind() {
  const auto& options = context_.options;
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) fail("--host {}: not an address of this machine ({})", options.host, ec.message());
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", options.host, options.port, ec.message());
  return acceptor_.local_endpoint().port();
}

void HttpServer::run() {
  asio::post(strand_, [this] { accept(); });
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < io_threads(); ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (auto& thread : threads) thread.join();
  // No I/O thread runs now: connections still held by pending handlers stop listening to the engine here, before
  // their strands go away with io_.
  registry_.for_each([](const std::shared_ptr<Connection>& connection) { connection->detach_from_engine(); });
}

void HttpServer::stop() {
  asio::post(strand_, [this] { begin_stop(); });
}

void HttpServer::accept() {
  if (stopping_) return;
  acceptor_.async_accept(asio::make_strand(io_), asio::bind_executor(strand_, [this](auto ec, tcp::socket socket) {
                           on_accept(ec, std::move(socket));
                         }));
}

void HttpServer::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
  if (stopping_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors (EMFILE) or kernel memory: wait a moment instead of spinning on the error.
    log_warn("accepting a connection failed: {}; retrying", ec.message());
    accept_retry_.expires_after(kAcceptRetry);
    accept_retry_.async_wait([this](const boost::system::error_code& wait_error) {
      if (!wait_error) accept();
    });
    return;
  }
  boost::system::error_code option_error;
  socket.set_option(tcp::no_delay(true), option_error);  // a stream's small chunks go out at once
  // The kernel's send buffer would otherwise grow to megabytes for a client that stops reading, before the
  // --max-unsent-bytes bound (on what waits above it) is ever reached. Half the bound (Linux doubles it).
  const size_t send_buffer = std::clamp<size_t>(context_.options.http.max_unsent_bytes / 2, 4096, size_t{4} << 20);
  socket.set_option(asio::socket_base::send_buffer_size(static_cast<int>(send_buffer)), option_error);
  const auto peer = socket.remote_endpoint(option_error);
  const std::string client = option_error ? std::string() : peer.address().to_string();
  auto connection = std::make_shared<Connection>(std::move(socket), shared_);
  const auto count = registry_.add(connection, client);
  const HttpLimits& limits = context_.options.http;
  const auto per_client = static_cast<size_t>(limits.max_connections_per_client);
  if (per_client > 0 && count.from_client > per_client)
    refuse(connection, count.open, too_many_from_client(limits.max_connections_per_client));
  else if (count.open <= static_cast<size_t>(limits.max_connections) || registry_.evict_oldest_idle())
    connection->start();
  else
    refuse(connection, count.open, too_many_connections(limits.max_connections));
  accept();
}

// Answered for a moment while few are; past kRefusalsInFlight more, closed at once.
void HttpServer::refuse(const std::shared_ptr<Connection>& connection, size_t open, HttpResponse response) {
  if (open <= static_cast<size_t>(context_.options.http.max_connections) + kRefusalsInFlight)
    connection->refuse(std::move(response));
  else
    connection->close();
}

void HttpServer::begin_stop() {
  if (stopping_) return;
  stopping_ = true;
  shared_.shutting_down = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  accept_retry_.cancel();
  const auto grace = context_.options.http.shutdown_grace;
  log_info(
      "stopping: no new connections, new requests get 503; {} connections open, running requests have {} s "
      "(--shutdown-grace)",
      registry_.size(), grace.count());
  registry_.for_each([](const std::shared_ptr<Connection>& connection) { connection->shut_down(); });
  grace_timer_.expires_after(grace);
  grace_timer_.async_wait([this](const boost::system::error_code& wait_error) {
    if (!wait_error) on_grace_over();
  });
  check_stopped();
}

void HttpServer::on_grace_over() {
  log_info("the grace period is over: cancelling the requests of {} connections", registry_.size());
  registry_.for_each([](const std::shared_ptr<Connection>& connection) { connection->cancel_request(); });
  grace_timer_.expires_after(kFinalWrites);
  grace_timer_.async_wait([this](const boost::system::error_code& wait_error) {
    if (wait_error) return;
    log_info("closing {} connections that are still open", registry_.size());
    registry_.for_each([](const std::shared_ptr<Connection>& connection) { connection->close(); });
  });
}

// The last connection is gone while stopping: nothing keeps io_ running, so run() returns.
void HttpServer::check_stopped() {
  if (stopping_ && registry_.size() == 0) grace_timer_.cancel();
}

}  // namespace duet::server
