#pragma once
// The routes each file contributes, matched literally by method and path: no client path is ever a pattern or a
// file. A handler takes the request and returns its response; it may throw ApiError (answered with its status),
// duet::Error (400) or anything else (500). Handlers of POST routes run on the server's worker threads and may take
// their time (parse, render, tokenize); GET handlers run on the I/O threads and must be quick (status routes).
// No handler waits for the engine: a generation returns at once with a body the engine's events fill
// (generation.h). A new route is one call, for example:
//
//   table.add(RouteTable::Method::post, "/v1/example", [&context](const HttpRequest& req) {
//     return json_response(answer_example(context, request_json(req)));
//   });
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_types.h"
#include "server/server_context.h"

namespace duet::server {

class RouteTable {
 public:
  enum class Method { get, post, del };  // del: DELETE
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  struct Route {
    Method method;
    std::string path;
    Handler handler;
    bool needs_key;       // false only for /health: probes come without one
    bool prefix = false;  // `path` ends in '/' and takes every longer path (GET /v1/models/{id})
  };

  void add(Method method, std::string path, Handler handler, bool needs_key = true);
  // A route for every path under `prefix` (which ends in '/'); the handler reads the rest from the request's path
  // and only compares it, never opens anything by it.
  void add_prefix(Method method, std::string prefix, Handler handler);

  // The route for a method ("HEAD" takes a GET route) and path. No route: `allowed` lists the methods the path has,
  // empty when the path is unknown.
  struct Match {
    const Route* route = nullptr;
    std::string allowed;
  };
  Match match(std::string_view method, std::string_view path) const;
  // Whether a request for this path needs a key: every path, known or not, but the keyless routes'.
  bool needs_key(std::string_view path) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

// The route files (one idea each).
void add_chat_route(RouteTable& table, ServerContext& context);
void add_completions_route(RouteTable& table, ServerContext& context);
void add_responses_route(RouteTable& table, ServerContext& context);
void add_stored_responses_routes(RouteTable& table, ServerContext& context);
void add_messages_routes(RouteTable& table, ServerContext& context);
void add_web_ui_route(RouteTable& table, ServerContext& context);
void add_status_routes(RouteTable& table, ServerContext& context);
void add_tokenize_routes(RouteTable& table, ServerContext& context);
void add_systemone_route(RouteTable& table, ServerContext& context);

}  // namespace duet::server
