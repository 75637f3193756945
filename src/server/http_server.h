#pragma once
// The HTTP/1.1 server: Boost.Beast's parser on Asio, one io_context run by a few threads, and small pools of
// workers for the routes that parse and tokenize (one of them for large bodies). Connections are served by
// connection.h; this file accepts them (up to --max-connections: at the limit the connection idle the longest is
// closed for the new one, and when none is idle the new one is answered 503; at most --max-connections-per-client
// from one address, 429 past it) and stops gracefully: on stop() it closes the listening socket,
// closes idle connections, answers new requests 503, lets running requests finish for --shutdown-grace seconds,
// then cancels what still runs (streams end `cancelled` with [DONE]) and closes whatever is left a few seconds later.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <memory>

#include "server/api_keys.h"
#include "server/body_budget.h"
#include "server/connection.h"
#include "server/connection_registry.h"
#include "server/route_table.h"
#include "server/server_context.h"

namespace duet::server {

// --max-connections as it will be enforced: `requested`, or when 0, as many as file descriptors allow up to 10,000.
// Raises this process's file-descriptor limit to its hard limit first; refuses (duet::Error) a number that does not
// fit in it.
int effective_max_connections(int requested);

class HttpServer {
 public:
  // Builds the routes. context.options.http.max_connections must be effective (see above).
  explicit HttpServer(ServerContext& context);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds options.host:options.port (port 0: a free one); returns the port. Throws duet::Error.
  int bind();
  // Serves until a stop() has run its course; call after bind().
  void run();
  // Starts the graceful stop; any thread may call it, any number of times.
  void stop();
  // --max-buffered-body-bytes from now on (BodyBudget::set_limit); any thread.
  void set_body_budget(size_t bytes) { bodies_.set_limit(bytes); }

 private:
  void accept();
  void on_accept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);
  void refuse(const std::shared_ptr<Connection>& connection, size_t open, HttpResponse response);
  void begin_stop();
  void on_grace_over();
  void check_stopped();

  ServerContext& context_;
  RouteTable routes_;
  ApiKeys keys_;
  ConnectionRegistry<Connection> registry_;  // outlives io_, whose pending handlers may hold the last connections
  BodyBudget bodies_;
  ConnectionShared shared_;
  boost::asio::io_context io_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;  // accepting and stopping
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::thread_pool workers_;        // destroyed (joined) first: their tasks post into io_
  boost::asio::thread_pool large_workers_;  // (and a large body's lease into bodies_)
  bool stopping_ = false;
};

}  // namespace duet::server
