#pragma once
// The HTTP layer: cpp-httplib set up with the limits (body size, worker threads), the API-key check, errors in
// OpenAI's shape for everything (unknown routes and methods, oversized bodies, handler failures) and the
// routes of the other files in this folder.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/errors.h"
#include "server/server_context.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace duet::server {

using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

// The routes each file contributes; HttpServer wraps every handler with the key check, error shapes and
// metrics before handing it to httplib.
class RouteTable {
 public:
  enum class Method { get, post };
  struct Route {
    Method method;
    std::string path;  // literal; no client path is ever matched as a pattern or a file
    RouteHandler handler;
    bool needs_key;
  };
  void add(Method method, std::string path, RouteHandler handler, bool needs_key = true);
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

// Route files (one idea each).
void add_chat_route(RouteTable& table, ServerContext& context);
void add_completions_route(RouteTable& table, ServerContext& context);
void add_status_routes(RouteTable& table, ServerContext& context);
void add_tokenize_routes(RouteTable& table, ServerContext& context);
void add_systemone_route(RouteTable& table, ServerContext& context);

// Writes an error in OpenAI's shape (with Retry-After when the error has one).
void send_error(httplib::Response& res, const ApiError& error);
void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200);

// Reads the request's JSON body, answering 400 for what is not a JSON object.
nlohmann::json request_json(const httplib::Request& req);

class HttpServer {
 public:
  explicit HttpServer(ServerContext& context);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds options.host:options.port (port 0: a free one); returns the port. Throws duet::Error.
  int bind();
  // Serves until stop(); call after bind().
  void listen();
  void stop();

 private:
  void widen_backlog();
  void install_routes();
  bool key_accepted(const httplib::Request& req) const;

  ServerContext& context_;
  std::unique_ptr<httplib::Server> server_;
  int listen_socket_ = -1;                // recorded when httplib creates it, to widen its backlog after bind
  std::vector<std::string> key_digests_;  // sha256 of each accepted key
};

}  // namespace duet::server
