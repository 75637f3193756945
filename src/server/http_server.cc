#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "server/request_parsing.h"

namespace duet::server {
namespace {

const char* method_name(RouteTable::Method method) { return method == RouteTable::Method::get ? "GET" : "POST"; }

// Equal-length digests compared without an early exit, so the time taken says nothing about the key.
bool digests_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string bearer_token(const httplib::Request& req) {
  std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "bearer ";
  if (header.size() < kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return {};
  return header.substr(kBearer.size());
}

}  // namespace

void RouteTable::add(Method method, std::string path, RouteHandler handler, bool needs_key) {
  routes_.push_back(Route{method, std::move(path), std::move(handler), needs_key});
}

void send_json(httplib::Response& res, const nlohmann::json& body, int status) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  if (error.retry_after_s) res.set_header("Retry-After", std::to_string(*error.retry_after_s));
  send_json(res, error_json(error), error.status());
}

nlohmann::json request_json(const httplib::Request& req) { return parse_json_body(req.body); }

HttpServer::HttpServer(ServerContext& context) : context_(context), server_(std::make_unique<httplib::Server>()) {
  for (const auto& key : context_.options.api_keys) key_digests_.push_back(sha256_hex(key));
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::key_accepted(const httplib::Request& req) const {
  if (key_digests_.empty()) return true;
  std::string digest = sha256_hex(bearer_token(req));
  bool accepted = false;
  for (const auto& key : key_digests_) accepted |= digests_equal(digest, key);  // every key, no early exit
  return accepted;
}

void HttpServer::install_routes() {
  auto& server = *server_;
  const ServerOptions& options = context_.options;

  // Streams hold a worker for their whole life: room for every slot, every queued request and a few status
  // calls. httplib takes ownership of the queue it gets (hence the raw new).
  int threads = std::max(options.http_threads, 4);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // httplib checks Content-Length against this before reading the body and answers 413.
  server.set_payload_max_length(options.max_body_bytes);
  server.set_keep_alive_max_count(1000);
  // Headers and body go out in separate writes; without this, Nagle's algorithm and the client's delayed ACK
  // add ~40 ms to every answer and to every streamed token.
  server.set_tcp_nodelay(true);
  server.set_read_timeout(30);
  server.set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = sock;
  });
  server.set_write_timeout(30);

  RouteTable table;
  add_chat_route(table, context_);
  add_completions_route(table, context_);
  add_status_routes(table, context_);
  add_tokenize_routes(table, context_);
  add_systemone_route(table, context_);

  std::set<std::string> keyless_paths;
  for (const auto& route : table.routes())
    if (!route.needs_key) keyless_paths.insert(route.path);
  // httplib calls this after the headers and before it reads (and would inflate) a body. A compressed body is
  // refused unread, so no small request can inflate into gigabytes; and with keys configured, a request without
  // one gets 401 on every path, known or not, before its body is read.
  server.set_pre_routing_handler([this, keyless_paths](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](const ApiError& error) {
      res.set_header("Connection", "close");  // the unread body must not be taken for the next request
      send_error(res, error);
      context_.metrics.count_response("unmatched", error.status());
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!keyless_paths.contains(req.path) && !key_accepted(req))
      return refuse(
          ApiError(401, "missing or invalid API key; send `Authorization: Bearer <key>`", "", "invalid_api_key"));
    if (std::string encoding = req.get_header_value("Content-Encoding"); !encoding.empty() && encoding != "identity")
      return refuse(ApiError(415,
                             fmt::format("Content-Encoding `{}` is not accepted: send the request body uncompressed",
                                         encoding.substr(0, 64)),
                             "", "unsupported_content_encoding"));
    return httplib::Server::HandlerResponse::Unhandled;
  });

  std::map<std::string, std::set<std::string>> allowed_methods;
  for (const auto& route : table.routes()) {
    allowed_methods[route.path].insert(method_name(route.method));
    if (route.method == RouteTable::Method::get) allowed_methods[route.path].insert("HEAD");
    RouteHandler wrapped = [this, route](const httplib::Request& req, httplib::Response& res) {
      // httplib would cut the answer to a client's Range header; a JSON answer or an event stream is
      // only meaningful whole, so Range is ignored (httplib hands routes the request as const).
      const_cast<httplib::Request&>(req).ranges.clear();
      try {
        route.handler(req, res);  // the key was checked before routing
      } catch (const ApiError& error) {
        send_error(res, error);
      } catch (const duet::Error& error) {
        send_error(res, ApiError(400, error.what()));
      } catch (const std::exception& error) {
        log_warn("{} {}: {}", req.method, route.path, error.what());
        send_error(res, ApiError(500, std::string("internal error: ") + error.what()));
      }
      context_.metrics.count_response(route.path, res.status < 0 ? 200 : res.status);
    };
    // Literal paths only: escape the regex httplib builds from the pattern (ours have no metacharacters but
    // '.', which must not match anything but a dot).
    std::string pattern;
    for (char c : route.path) {
      if (c == '.')
        pattern += "\\.";
      else
        pattern += c;
    }
    if (route.method == RouteTable::Method::get)
      server.Get(pattern, wrapped);
    else
      server.Post(pattern, wrapped);
  }

  // Everything httplib answers itself (no route, wrong method, 413, bad request line) gets the same JSON shape.
  server.set_error_handler(httplib::Server::HandlerWithResponse([this, allowed_methods](const httplib::Request& req,
                                                                                        httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a route's own error body
    auto known = allowed_methods.find(req.path);
    std::string route = known == allowed_methods.end() ? "unmatched" : req.path;
    ApiError error(res.status, "");
    if (res.status == 404 && known != allowed_methods.end()) {
      std::string allow = fmt::format("{}", fmt::join(known->second, ", "));
      res.set_header("Allow", allow);
      error = ApiError(405, fmt::format("method {} is not allowed on {}; use {}", req.method, req.path, allow), "",
                       "method_not_allowed");
    } else if (res.status == 404) {
      error = ApiError(404, "no such route; see docs/api.md for the routes duet serves", "", "not_found");
    } else if (res.status == 413) {
      error = ApiError(
          413,
          fmt::format("the request body is larger than {} bytes (--max-body-bytes)", context_.options.max_body_bytes),
          "", "request_too_large");
    } else {
      error =
          ApiError(res.status, fmt::format("the request could not be read (HTTP {})", res.status), "", "bad_request");
    }
    send_error(res, error);
    context_.metrics.count_response(route, res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));

  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "internal error"));
  });
}

int HttpServer::bind() {
  const auto& options = context_.options;
  if (options.port == 0) {
    int port = server_->bind_to_any_port(options.host);
    if (port <= 0) fail("cannot bind {}: no free port", options.host);
    widen_backlog();
    return port;
  }
  if (!server_->bind_to_port(options.host, options.port))
    fail("cannot bind {}:{} (in use, or not an address of this machine)", options.host, options.port);
  widen_backlog();
  return options.port;
}

// Debian's compiled httplib listens with a backlog of 5: a burst of new connections (16 clients starting at once)
// overflows it and some are dropped. Calling listen() again on the bound socket raises the backlog.
void HttpServer::widen_backlog() {
  if (listen_socket_ >= 0 && ::listen(listen_socket_, SOMAXCONN) != 0)
    log_warn("listen backlog stays at httplib's default: {}", std::strerror(errno));
}

void HttpServer::listen() { server_->listen_after_bind(); }

void HttpServer::stop() { server_->stop(); }

}  // namespace duet::server
