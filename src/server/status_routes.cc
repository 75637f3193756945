// GET /health, GET /v1/models (and /v1/models/{id}), GET /metrics.
#include <fmt/format.h>

#include "server/errors.h"
#include "server/generation.h"
#include "server/route_table.h"

namespace duet::server {
namespace {

nlohmann::json model_json(const ServerContext& context) {
  return {{"id", context.options.served_model_name},
          {"object", "model"},
          {"created", context.started_at},
          {"owned_by", "duet"},
          {"max_model_len", context.options.context},
          // POST /v1/systemone answers when the model folder holds a joint head.
          {"decisions", context.decisions.has_value()}};
}

}  // namespace

void add_status_routes(RouteTable& table, ServerContext& context) {
  // Open without a key: load balancers and orchestrators probe it.
  table.add(
      RouteTable::Method::get, "/health",
      [&context](const HttpRequest&) {
        if (!context.ready.load(std::memory_order_acquire)) return json_response({{"status", "loading"}}, 503);
        // A device error is fatal: a supervisor sees it here before the process exits (duet serve).
        if (std::string failure = context.backend.stats().failure; !failure.empty())
          return json_response({{"status", "failed"}, {"error", failure}}, 503);
        return json_response({{"status", "ok"}});
      },
      /*needs_key=*/false);

  table.add(RouteTable::Method::get, "/v1/models", [&context](const HttpRequest&) {
    return json_response({{"object", "list"}, {"data", nlohmann::json::array({model_json(context)})}});
  });

  // The one model by name; the id is compared, never used for anything else.
  table.add_prefix(RouteTable::Method::get, "/v1/models/", [&context](const HttpRequest& req) {
    const std::string_view id = std::string_view(req.path).substr(std::string_view("/v1/models/").size());
    if (id != context.options.served_model_name)
      throw ApiError(404,
                     fmt::format("the model `{}` does not exist; this server serves `{}`", id.substr(0, 256),
                                 context.options.served_model_name),
                     "model", "model_not_found");
    return json_response(model_json(context));
  });

  table.add(RouteTable::Method::get, "/metrics", [&context](const HttpRequest&) {
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = context.metrics.render(context.backend.stats(), context.options.served_model_name);
    return res;
  });
}

}  // namespace duet::server
